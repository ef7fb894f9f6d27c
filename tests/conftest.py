"""Test-session rules shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.launches import Launches, session_launches_for


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``stress`` (minutes of repeated multi-process runs) run only when selected by name of their
    marker, e.g. ``-m stress``; otherwise they are deselected (reported as such, not skipped)."""
    if "stress" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("stress") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("stress")])
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def session_launches(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launches]:
    """The runs registered with ``tests.helpers.launches.session_run`` that selected tests use, started in the
    background with the session's first test (autouse), two at a time; a test reads its run's result."""
    yield from session_launches_for(request, tmp_path_factory)
