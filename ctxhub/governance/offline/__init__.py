"""Offline models: ctxhub runs, chats and compacts with no API key and no network.

Both are pydantic-ai ``FunctionModel`` instances whose model name starts with ``offline:``, so
wherever a model name is shown (responses, reports, the dashboard) it says the model is offline.

* ``offline:extractive`` — a deterministic extractive summariser: salient sentences, the fact
  ledger and the latest state, poured into the summary structure.
* ``offline:demo`` — a demo chat model that lists and reads this repository's files with two
  harmless tools, so governance has real tool outputs to work on.
"""

from __future__ import annotations

from .demo import OFFLINE_DEMO, PathRefused, demo_model, demo_toolset
from .extractive import OFFLINE_EXTRACTIVE, extractive_draft, extractive_model

__all__ = [
    "OFFLINE_DEMO",
    "OFFLINE_EXTRACTIVE",
    "PathRefused",
    "demo_model",
    "demo_toolset",
    "extractive_draft",
    "extractive_model",
]
