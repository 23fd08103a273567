"""The words the steps, the working state and the report share: what happened to a part, which
step did it, where a message stands. They import nothing, so every module may use them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Zone = Literal["head", "middle", "tail", "pinned"]
Action = Literal[
    "kept", "truncated", "masked", "deduplicated", "evicted", "dropped", "synthesized", "moved"
]
"""What happened to a part. ``moved``: a tool result that came later than the request after
its call, which pair repair moved into that request; it is reported at both places, with its
tokens where it now is and none where it was."""
StepName = Literal[
    "normalize", "evict", "truncate", "mask", "window", "drop_groups", "dedupe", "shrink"
]

Detail = str | Callable[[], str]
"""A step's detail for the report, or how to work it out when the report is built."""
