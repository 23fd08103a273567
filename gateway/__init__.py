"""The gateway: the providers' own APIs on the hub, so an agent not written for ctxhub is stored,
shown and governed by pointing its base URL here."""
