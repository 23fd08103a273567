"""What the export format names: its version, the header's key, its limits, and the error
that says which line of a file is at fault."""

from __future__ import annotations

from sessions.payloads import MAX_STORED_INT
from sessions.services.errors import Invalid

FORMAT_VERSION = 1
HEADER_KEY = "ctxhub_export"
MAX_INT = MAX_STORED_INT  # the database's integer columns
MAX_TOOLS = 500

# Audit event data naming a record by its id: the key is the record's type.
REFERENCES = ("compaction", "clear", "pin")


class BadExport(Invalid):
    """A file that is not an export this hub can import: the line and the field at fault."""

    def __init__(self, line: int, field: str, problem: str) -> None:
        where = f"{field}: " if field else ""
        super().__init__(f"line {line}: {where}{problem}", field=field or None, line=line)
        self.line = line
