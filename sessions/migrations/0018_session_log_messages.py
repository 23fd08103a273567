"""Each session keeps how many messages its log holds (the next seq) beside its token total."""

from typing import Any

from django.db import migrations, models
from django.db.models import Max, OuterRef, Subquery
from django.db.models.functions import Coalesce


def count_logs(apps: Any, schema_editor: Any) -> None:
    AgentSession = apps.get_model("agent_sessions", "AgentSession")
    Message = apps.get_model("agent_sessions", "Message")
    newest = (
        Message.objects.filter(session_id=OuterRef("pk"))
        .values("session_id")
        .annotate(newest=Max("seq"))
        .values("newest")
    )
    AgentSession.objects.update(log_messages=Coalesce(Subquery(newest) + 1, 0))


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0017_records_keep_who_acted")]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="log_messages",
            field=models.PositiveIntegerField(
                default=0,
                help_text="How many messages the log holds, which is the next one's seq; kept "
                "as `log_tokens` is. An append takes the session's row lock and both counts in "
                "one statement.",
            ),
        ),
        migrations.RunPython(count_logs, migrations.RunPython.noop),
    ]
