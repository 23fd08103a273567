"""The governance engine: pure functions from a session's history to what a model should see.

No Django, no Celery, no I/O: agents can use it without the hub.
"""
