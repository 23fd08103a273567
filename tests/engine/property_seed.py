"""The seed of this run's property tests: random per run on a developer's machine, fixed by
``CTXHUB_PROPERTY_SEED``; none in CI, where the ``ci`` profile (tests/conftest.py) derandomizes
Hypothesis so every run replays the same examples.

Hypothesis draws every example of the property tests from it (``@seed``), so a failure seen on
a laptop is replayed with ``CTXHUB_PROPERTY_SEED=<seed> pytest tests/engine/...``.
"""

from __future__ import annotations

import os
import secrets

ENV = "CTXHUB_PROPERTY_SEED"
SHRINK_ENV = "CTXHUB_PROPERTY_SHRINK"


def _seed() -> int | None:
    given = os.environ.get(ENV, "").strip()
    if given:
        return int(given)
    # An explicit seed would take precedence over the CI profile's derandomize.
    return None if os.environ.get("CI") else secrets.randbelow(1 << 32)


SEED = _seed()
"""Read once per process, so every test module and the terminal summary see the same seed;
None when Hypothesis derandomizes (CI)."""

SHRINK = os.environ.get(SHRINK_ENV, "").strip() not in ("", "0")
"""Whether a failing example is made minimal: slow on long histories (minutes), so asked for
when replaying a failure rather than on every run."""
