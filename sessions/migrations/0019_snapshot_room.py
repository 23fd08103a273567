"""A snapshot keeps the room a request has (the fleet orders by the share of it a session's next
request takes); existing snapshots get it from their report."""

import json
from typing import Any

from django.db import migrations, models


def fill_room(apps: Any, schema_editor: Any) -> None:
    GovernedSnapshot = apps.get_model("agent_sessions", "GovernedSnapshot")
    rows = GovernedSnapshot.objects.filter(room__isnull=True).only("session_id", "report")
    filled = []
    for row in rows.iterator(chunk_size=500):
        try:
            report = json.loads(row.report)
            room = (
                report["window_tokens"]
                - report["reserved_output_tokens"]
                - report["safety_margin_tokens"]
            )
        except (ValueError, KeyError, TypeError):
            continue  # a report that does not read: the snapshot is redone when next governed
        row.room = max(int(room), 0)
        filled.append(row)
        if len(filled) == 500:
            GovernedSnapshot.objects.bulk_update(filled, ["room"])
            filled = []
    GovernedSnapshot.objects.bulk_update(filled, ["room"])


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0018_session_log_messages")]

    operations = [
        migrations.AddField(
            model_name="governedsnapshot",
            name="room",
            field=models.PositiveIntegerField(
                help_text="Tokens a request may carry in all: the window less the answer's "
                "reserve and the margin (what the fleet orders its fullest sessions by).",
                null=True,
            ),
        ),
        migrations.RunPython(fill_room, migrations.RunPython.noop),
    ]
