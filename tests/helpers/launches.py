"""Independent launches of one test module, started together so that their processes share the two cores.

A launched run spends much of its wall time on one core (a launcher importing torch before it starts its workers,
a single-process script, workers sleeping or waiting for each other) while the other core idles; serially, the
suite pays those gaps once per run. A module fixture built on :class:`Launches` starts every run its selected tests
need at once, each in a thread that waits for its subprocesses; each test then waits for its own run and asserts on
its result as before. A run's exception (a failed or timed-out launch) is raised in the tests that use that run
only. Nothing is started for a test that was not selected. Runs that need no other run's result (the example
scripts, the compatibility suite's launches) register with :func:`session_run` instead: they start in the
background when the session starts, so that they overlap the in-process tests (which use one core).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest


def selected_names(request: pytest.FixtureRequest) -> set[str]:
    """The names (``test_x`` and ``test_x[param]``) of this module's tests selected in this session."""
    names: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is request.module:
            names.update((item.name, getattr(item, "originalname", item.name)))
    return names


class Launches:
    """Named runs started in background threads; :meth:`result` waits for one of them."""

    def __init__(self, at_once: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="launch")
        self._futures: dict[str, Future] = {}

    def start(self, name: str, run: Callable[..., Any], *args: Any) -> None:
        """Starts ``run(*args)`` under ``name`` (once: a name already started is left running)."""
        if name not in self._futures:
            self._futures[name] = self._pool.submit(run, *args)

    def result(self, name: str) -> Any:
        """What run ``name`` returned (waiting for it), or its exception raised here."""
        if name not in self._futures:
            raise KeyError(f"run {name!r} was not started: its fixture starts runs only for the selected tests, "
                           f"started: {sorted(self._futures)}")
        return self._futures[name].result()

    def close(self) -> None:
        """Waits for every run (each bounds its own subprocesses with a timeout)."""
        self._pool.shutdown(wait=True)


def launches_for(request: pytest.FixtureRequest, runs: dict[str, tuple[set[str], Callable[[], Any]]]) \
        -> Iterator[Launches]:
    """A fixture body: starts each run of ``runs`` (name -> (test names that use it, callable)) that a selected
    test of the module uses, yields the :class:`Launches`, and waits for all of them at teardown."""
    wanted = selected_names(request)
    launches = Launches()
    try:
        for name, (users, run) in runs.items():
            if users & wanted:
                launches.start(name, run)
        yield launches
    finally:
        launches.close()


# Runs started in the background when the session starts: name -> (module, the tests that use it, run(tmp_dir)).
# Filled at import (test collection) by :func:`session_run`; the autouse session fixture ``session_launches``
# (tests/conftest.py) starts every registered run that a selected test uses, SESSION_AT_ONCE at a time in the order
# of registration, while the session's in-process tests run on the other core.
SESSION_AT_ONCE = 2
SESSION_RUNS: dict[str, tuple[str, set[str], Callable[[Path], Any]]] = {}


def session_run(name: str, *tests: str) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    """Decorator: registers ``run(tmp_dir)`` as the session-wide run ``name`` that ``tests`` (names of tests in the
    decorated function's module) read through the ``session_launches`` fixture."""

    def register(run: Callable[[Path], Any]) -> Callable[[Path], Any]:
        SESSION_RUNS[name] = (run.__module__, set(tests), run)
        return run

    return register


def session_launches_for(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) \
        -> Iterator[Launches]:
    """The body of the session fixture: starts the registered runs that selected tests use (``SESSION_AT_ONCE`` at a
    time), yields the :class:`Launches` and waits for them at the end of the session."""
    selected = {(getattr(item.module, "__name__", ""), name) for item in request.session.items
                if getattr(item, "module", None) is not None
                for name in (item.name, getattr(item, "originalname", item.name))}
    launches = Launches(SESSION_AT_ONCE)
    try:
        for name, (module, tests, run) in SESSION_RUNS.items():
            if any((module, test) in selected for test in tests):
                launches.start(name, run, tmp_path_factory.mktemp(name))
        yield launches
    finally:
        launches.close()
