"""A client for the hub's REST API (sync ``Hub`` and async ``AsyncHub``) and ``RemoteGovernor``,
the capability that lets an external pydantic-ai agent keep its history in the hub.

::

    hub = Hub("https://ctxhub.example", api_key="ctxh_…")
    session = hub.create_session("Fix the build", model="openai:gpt-4o", tools=definitions)
    hub.append(session.id, messages)             # pydantic-ai messages in
    context = hub.context(session.id)            # pydantic-ai messages out, with the report
    hub.update_session(session.id, tools=other)  # the tool definitions the agent now sends

    agent = Agent("openai:gpt-4o", capabilities=[RemoteGovernor(AsyncHub(...), session.id)])

The hub counts the tool definitions an agent sends with each request into what the request
carries (the history's budget is smaller by them): give them as pydantic-ai ``ToolDefinition``
objects or as ``{"name", "description", "parameters"}`` JSON. ``RemoteGovernor`` sends its
agent's own whenever they change.

Both clients retry a request answered 429 or 5xx (or lost in transport) with exponential
backoff and jitter, waiting at least the server's ``Retry-After``; an append carries an
``Idempotency-Key`` made once and reused on its retries, so a retry never stores twice. Pages
are iterators. Errors raise ``HubError`` with the server's code, message and field.
"""

from ctxhub.client.async_hub import AsyncHub
from ctxhub.client.calls import Tools, tool_json
from ctxhub.client.hub import Hub
from ctxhub.client.models import (
    Appended,
    Context,
    HubError,
    Job,
    Preview,
    Recalled,
    RecallHit,
    Session,
    StoredMessage,
    Tool,
)
from ctxhub.client.remote import RemoteGovernor

__all__ = [
    "Appended",
    "AsyncHub",
    "Context",
    "Hub",
    "HubError",
    "Job",
    "Preview",
    "RecallHit",
    "Recalled",
    "RemoteGovernor",
    "Session",
    "StoredMessage",
    "Tool",
    "Tools",
    "tool_json",
]
