"""A channel layer for a test to receive live pushes on, as a page's socket would."""

from __future__ import annotations

from typing import Any

from channels.layers import (
    DEFAULT_CHANNEL_LAYER,
    InMemoryChannelLayer,
    channel_layers,
    get_channel_layer,
)


def listening_layer() -> Any:
    """A layer to receive on. With Redis, one of the test's own: the process's layer keeps
    per-inbox locks across event loops, and every test (every ``async_to_sync`` call too) runs
    its own loop, so a lock one loop left behind fails the next loop's receive whenever it has
    to wait for it. The pushes reach it through their group in Redis. In memory, the process's
    layer itself: another instance would not share its groups."""
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        return layer
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
