"""Test-session rules shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from tests.helpers.launches import Launches, session_launches_for

# One intra-op thread in the test process, as in every process the tests launch (tests/helpers/dist_spawn.base_env):
# the models are tiny, and while the session's background launches keep both cores busy a second thread mostly spins.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``stress`` (minutes of repeated multi-process runs) run only when selected by name of their
    marker, e.g. ``-m stress``; otherwise they are deselected (reported as such, not skipped)."""
    if "stress" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("stress") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("stress")])
        items[:] = kept


_ROOT_ENTRIES: set[str] = set()  # what the repository's top folder held when the session started


def pytest_sessionstart(session: pytest.Session) -> None:
    _ROOT_ENTRIES.update(os.listdir(session.config.rootpath))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run whose tests wrote into the repository's top folder (a Trainer without ``default_root_dir`` saves under
    the working directory; a relative path) fails, naming what appeared: tests write under their ``tmp_path``."""
    new = sorted(set(os.listdir(session.config.rootpath)) - _ROOT_ENTRIES - {".pytest_cache", "__pycache__"})
    if new and exitstatus == pytest.ExitCode.OK:
        session.config.get_terminal_writer().line(
            f"FAILED: the tests left {new} in {session.config.rootpath}; give each Trainer default_root_dir=tmp_path "
            "(it saves under the working directory otherwise).", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def session_launches(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launches]:
    """The runs registered with ``tests.helpers.launches.session_run`` that selected tests use, started in the
    background with the session's first test (autouse), two at a time; a test reads its run's result."""
    yield from session_launches_for(request, tmp_path_factory)
