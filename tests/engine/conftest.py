"""Engine tests: the property tests' seed is printed at the end of every run."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seed = sys.modules.get("property_seed")
    if seed is not None and seed.SEED is not None:
        terminalreporter.write_line(
            f"property tests ran with {seed.ENV}={seed.SEED} (set it to replay this run)"
        )
