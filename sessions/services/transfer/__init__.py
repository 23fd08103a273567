"""Export and import of a session: a JSONL file holding its log and its records.

The format (version 1) is one JSON object a line::

    {"ctxhub_export": 1, "session": {"title", "model", "context_window", "policy",
                                     "summarizer", "chat_model", "tool_definitions"}}
    {"type": "message", "seq": 0, "source": "api", "created_at": "...", "message": {...}}
    ...                                          (every message, in seq order, then:)
    {"type": "compaction", "first_seq", "last_seq", "replacement", ..., "supersedes": 0}
    {"type": "clear", "from_seq", "created_at", "undone_at"}
    {"type": "pin", "seq", "created_at", "undone_at"}
    {"type": "evicted_output", "ref", "text", "created_at"}
    {"type": "audit_event", "verb", "tokens_before", "tokens_after", "data", "created_at"}

A record refers to another by its ordinal: its position among the records of its type in the
file (``"supersedes": 0`` is the file's first compaction; an audit event's ``{"pin": 2}`` its
third pin), never by a database id, which means nothing to another hub.

What is derived is left out and made again by the hub that imports: tokens, facts and hashes
(the messages go through the normal append path), the facts of a compaction's own messages,
an evicted output's tokens. Not carried: the people who acted (``actor`` names them; an
imported record keeps the name, ``actor_name``, not a user of this hub), when each message was
appended (the import appends it now; records keep their times), compaction jobs, and the
requests sent with the Governor's state (an imported session's next request is a new start).

Importing validates every line before anything is written, then writes one transaction: a new
session, owned by the importer, never one that exists.
"""

from sessions.services.transfer.export import export_filename, export_jsonl, export_lines
from sessions.services.transfer.format import FORMAT_VERSION, BadExport
from sessions.services.transfer.markdown import export_markdown
from sessions.services.transfer.reading import ParsedExport, parse_export
from sessions.services.transfer.writing import import_session, write_import

__all__ = [
    "FORMAT_VERSION",
    "BadExport",
    "ParsedExport",
    "export_filename",
    "export_jsonl",
    "export_lines",
    "export_markdown",
    "import_session",
    "parse_export",
    "write_import",
]
