"""JSON kept as written.

PostgreSQL's ``jsonb`` stores a parsed form that re-sorts object keys (shorter keys first): a
tool call's arguments ``{"zeta": 1, "b": 2}`` come back as ``{"b": 2, "zeta": 1}``. A request
rebuilt from them carries bytes the model never produced, which misses the provider's prompt
cache and counts differently. The ``json`` type keeps the text as it was written, and reads
with the same operators (``->``, ``->>``, ``#>``); SQLite keeps text either way.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.types.json import Json


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class WrittenJSONField(models.JSONField):
    """A ``JSONField`` whose objects come back with their keys in the order they were written.
    Stored as PostgreSQL's ``json``, which has no containment or key-existence lookups
    (``contains``, ``has_key``) and no equality: read its values, do not filter on them, and
    ask for rows of a model holding one with ``Exists``, not ``distinct()``."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> Any:
        if connection.vendor != "postgresql":
            return super().get_db_prep_value(value, connection, prepared)
        if not prepared:
            value = self.get_prep_value(value)
        return Json(value, dumps=_compact)  # sent as json: jsonb's parse would re-sort it

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        if connection.vendor == "postgresql":
            return value  # psycopg has read the json type already (its parse keeps key order)
        return super().from_db_value(value, expression, connection)
