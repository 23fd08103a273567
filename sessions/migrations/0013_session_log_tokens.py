"""Each session keeps the sum of its messages' token counts, so an append or a page learns the
log's size without an aggregate over every message; existing sessions get theirs counted."""

from typing import Any

from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce


def count_log_tokens(apps: Any, schema_editor: Any) -> None:
    session_model = apps.get_model("agent_sessions", "AgentSession")
    message_model = apps.get_model("agent_sessions", "Message")
    totals = (
        message_model.objects.filter(session=OuterRef("pk"))
        .values("session")
        .annotate(total=Sum("tokens"))
        .values("total")
    )
    session_model.objects.update(log_tokens=Coalesce(Subquery(totals), 0))


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0012_alter_message_source"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="log_tokens",
            field=models.BigIntegerField(
                default=0,
                help_text="The sum of its messages' stored token counts, kept by every write of "
                "them (an append, a fork's copy, a recount): the log's size without reading "
                "the log.",
            ),
        ),
        migrations.RunPython(count_log_tokens, migrations.RunPython.noop),
    ]
