"""Test-session rules shared by every test folder."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``stress`` (minutes of repeated multi-process runs) run only when selected by name of their
    marker, e.g. ``-m stress``; otherwise they are deselected (reported as such, not skipped)."""
    if "stress" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("stress") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("stress")])
        items[:] = kept
