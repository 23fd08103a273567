"""Pieces are searched by their identifiers' words and their abbreviations' meanings too: each
stores its ``terms`` (``ctxhub.governance.recall_terms.added_terms``), filled here for the
pieces already written, and the full-text index covers them beside the text."""

from typing import Any

from django.db import migrations, models

TABLE = "agent_sessions_messagepiece"


def _index(vendor: str, columns: tuple[str, ...]) -> list[str]:
    """The statements that build the search index over ``columns``, for ``vendor``."""
    if vendor == "postgresql":
        document = " || ' ' || ".join(columns)
        return [
            f"ALTER TABLE {TABLE} ADD COLUMN search tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('english', {document})) STORED",
            f"CREATE INDEX piece_search ON {TABLE} USING GIN (search)",
        ]
    if vendor == "sqlite":
        names = ", ".join(columns)
        new = ", ".join(f"new.{column}" for column in columns)
        old = ", ".join(f"old.{column}" for column in columns)
        return [
            f"CREATE VIRTUAL TABLE {TABLE}_fts USING fts5({names}, content='{TABLE}', "
            "content_rowid='id', tokenize='porter unicode61')",
            f"CREATE TRIGGER {TABLE}_ai AFTER INSERT ON {TABLE} "
            f"BEGIN INSERT INTO {TABLE}_fts(rowid, {names}) VALUES (new.id, {new}); END",
            f"CREATE TRIGGER {TABLE}_ad AFTER DELETE ON {TABLE} "
            f"BEGIN INSERT INTO {TABLE}_fts({TABLE}_fts, rowid, {names}) "
            f"VALUES ('delete', old.id, {old}); END",
            f"INSERT INTO {TABLE}_fts({TABLE}_fts) VALUES ('rebuild')",
        ]
    return []


def _drop_index(vendor: str) -> list[str]:
    if vendor == "postgresql":
        return [f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS search"]  # its index goes with it
    if vendor == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {TABLE}_ai",
            f"DROP TRIGGER IF EXISTS {TABLE}_ad",
            f"DROP TABLE IF EXISTS {TABLE}_fts",
        ]
    return []


def _run(schema_editor: Any, statements: list[str]) -> None:
    for statement in statements:
        schema_editor.execute(statement)


def drop_index(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, _drop_index(schema_editor.connection.vendor))


def index_text_and_terms(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, _index(schema_editor.connection.vendor, ("text", "terms")))


def index_text(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, _index(schema_editor.connection.vendor, ("text",)))


def fill_terms(apps: Any, schema_editor: Any) -> None:
    from ctxhub.governance.recall_terms import added_terms

    MessagePiece = apps.get_model("agent_sessions", "MessagePiece")
    batch = []
    for piece in MessagePiece.objects.order_by("pk").only("pk", "text").iterator(chunk_size=2_000):
        piece.terms = added_terms(piece.text)
        batch.append(piece)
        if len(batch) == 2_000:
            MessagePiece.objects.bulk_update(batch, ["terms"])
            batch = []
    MessagePiece.objects.bulk_update(batch, ["terms"])


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0010_message_pieces"),
    ]

    # The index is dropped first (a table rebuilt to add or remove a column loses SQLite's
    # triggers, and each update would parse the text again), and built over text and terms
    # once the terms are filled.
    operations = [
        migrations.RunPython(drop_index, index_text),
        migrations.AddField(
            model_name="messagepiece",
            name="terms",
            field=models.TextField(
                blank=True,
                default="",
                help_text=(
                    "What the text is searched by besides its own words: the words of its "
                    "identifiers and what its abbreviations stand for "
                    "(ctxhub.governance.recall_terms)."
                ),
            ),
        ),
        migrations.RunPython(fill_terms, migrations.RunPython.noop),
        migrations.RunPython(index_text_and_terms, drop_index),
    ]
