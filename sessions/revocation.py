"""Closing the live sockets of someone who may no longer watch.

A socket is authorised once, at its handshake. Each socket also listens on two groups: its
login's (the Django session it was opened with) and its user's. Logging out closes the
sockets of that login; deactivating or deleting a user, or taking away staff rights, closes
all of the user's sockets. A closed page reconnects, and the handshake decides again. (API
keys open no sockets: revoking one has nothing to close.)
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

log = logging.getLogger(__name__)

# The consumer method that closes its socket.
CLOSE_EVENT = "socket.revoke"
# The close code a revoked socket gets (4000-4999: the application's own).
REVOKED = 4403


def login_group(session_key: str) -> str:
    return f"login.{session_key}"


def user_group(user_id: Any) -> str:
    return f"user.{user_id}"


def close_sockets(group: str) -> None:
    """Close every socket in ``group``. A channel layer that is down loses the message; the
    sockets then live until they reconnect, and are refused then."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": CLOSE_EVENT})
    except Exception as error:
        log.warning("closing the sockets of %s failed: %s", group, error)


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        close_sockets(login_group(session_key))


@receiver(pre_save, sender=get_user_model())
def _remember_rights(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.pk is not None:
        rows = sender.objects.filter(pk=instance.pk).values_list("is_active", "is_staff")
        instance._rights_before = rows.first()


@receiver(post_save, sender=get_user_model())
def _rights_changed(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    before = getattr(instance, "_rights_before", None)
    if created or before is None:
        return
    was_active, was_staff = before
    if (was_active and not instance.is_active) or (was_staff and not instance.is_staff):
        close_sockets(user_group(instance.pk))


@receiver(post_delete, sender=get_user_model())
def _deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    close_sockets(user_group(instance.pk))
