"""Masking's off switch moved: ``apply: "never"`` turns it off, and keeping no result (both
keeps 0) now masks every older result. Stored policies that turned masking off with both keeps
at 0 say so the new way, so they keep meaning what they meant."""

from typing import Any

from django.db import migrations


def _off_by_keeps(policy: Any) -> bool:
    masking = policy.get("masking") if isinstance(policy, dict) else None
    return (
        isinstance(masking, dict)
        and masking.get("keep_first") == 0
        and masking.get("keep_last") == 0
        and masking.get("apply") != "never"
    )


def forwards(apps: Any, schema_editor: Any) -> None:
    for name in ("AgentSession", "CompactionJob"):
        model = apps.get_model("agent_sessions", name)
        for row in model.objects.only("pk", "policy").iterator():
            if _off_by_keeps(row.policy):
                policy = {**row.policy, "masking": {**row.policy["masking"], "apply": "never"}}
                model.objects.filter(pk=row.pk).update(policy=policy)


def backwards(apps: Any, schema_editor: Any) -> None:
    for name in ("AgentSession", "CompactionJob"):
        model = apps.get_model("agent_sessions", name)
        for row in model.objects.only("pk", "policy").iterator():
            masking = row.policy.get("masking") if isinstance(row.policy, dict) else None
            if isinstance(masking, dict) and masking.get("apply") == "never":
                masking = {**masking, "keep_first": 0, "keep_last": 0}
                masking.pop("apply")
                model.objects.filter(pk=row.pk).update(policy={**row.policy, "masking": masking})


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0006_api_keys")]

    operations = [migrations.RunPython(forwards, backwards)]
