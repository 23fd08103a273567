"""Deleting a session: what the database must be told first.

Audit events are immutable in PostgreSQL itself (a trigger, migration 0015): the one deletion
it lets through is of the events of a session being deleted, which the deleting transaction
names here before the cascade reaches them. A session goes through the ORM (Django admin, a
user's deletion), which announces each one it deletes (``pre_delete``) inside the transaction
that deletes it.

The last request a session sent is kept in the shared cache (``sessions.services.continuing``):
it goes with the session, once the deletion commits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import connections, transaction
from django.db.models.signals import post_delete, pre_delete
from django.dispatch import receiver

from sessions.models import AgentSession

DELETING = "ctxhub.deleting_sessions"
"""The transaction's setting naming the sessions it deletes (comma-separated ids)."""


@receiver(pre_delete, sender=AgentSession)
def _announce(sender: type[AgentSession], instance: AgentSession, using: str, **_: Any) -> None:
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # Local to the transaction (the third argument): it ends with the deletion.
        cursor.execute(
            "SELECT set_config(%s, concat_ws(',', nullif(current_setting(%s, true), ''), %s),"
            " true)",
            [DELETING, DELETING, str(instance.pk)],
        )


@receiver(post_delete, sender=AgentSession)
def _forget(sender: type[AgentSession], instance: AgentSession, using: str, **_: Any) -> None:
    from sessions.services.continuing import forget

    transaction.on_commit(partial(forget, instance.pk), using=using)
