"""Eviction: a large tool output is replaced by a preview and a reference (pydantic-deep, 004).

The reference derives from the content (sha256), so evicting the same output twice yields the
same reference and governing is idempotent. The full text is returned to the caller, never
stored here.
"""

from __future__ import annotations

import hashlib

from ..policy import Eviction


def eviction_ref(text: str) -> str:
    """The reference of an evicted text: a prefix of its sha256."""
    return "ev_" + hashlib.sha256(text.encode()).hexdigest()[:20]


def preview(text: str, ref: str, tokens: int, policy: Eviction) -> str:
    """What the model sees instead of an evicted output."""
    lines = text.splitlines()
    shown = "\n".join(lines[: policy.preview_lines])[: policy.preview_chars]
    more = len(lines) - min(len(lines), policy.preview_lines)
    head = (
        f"[output evicted: ~{tokens} tokens, {len(lines)} lines; reference {ref}. "
        f"Read it with {policy.tool_name}(ref={ref!r}, offset, limit, grep).]"
    )
    tail = f"\n[… {more} more lines]" if more else ""
    return f"{head}\n{shown}{tail}" if shown else head
