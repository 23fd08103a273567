"""Celery's Redis transport, except that losing Redis cannot end the worker.

When the broker connection drops, the worker closes it and reconnects. Closing a channel
restores the messages it holds unacknowledged (every settle run waiting for its countdown, a
job being worked on); kombu does that through the connection it has already taken apart, so
building the Redis client fails with an AttributeError, which is not a connection error: the
worker gave up ("Unrecoverable error") instead of reconnecting. Here such a restore is skipped:
the messages stay in Redis's unacknowledged set, restored by a worker once the visibility
timeout passes (or lost with Redis's data, when it restarted empty: compaction jobs are found
again from their rows by the sweeper, settle runs are asked for again by the next append).
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis

log = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        if client is None and self.channel.connection.client is None:
            held: dict[str, Any] = self._delivered or {}
            log.warning(
                "broker connection lost: %d unacknowledged message(s) left in Redis, restored "
                "after the visibility timeout",
                len(held),
            )
            held.clear()
            return
        super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
