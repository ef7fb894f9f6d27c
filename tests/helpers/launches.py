"""Launched runs (subprocesses: scripts, torchrun, ``stoker launch``) started in the background when the session
starts, so that they overlap the in-process tests and each other instead of running one after another.

A launched run spends much of its wall time on one core (a launcher importing torch before it starts its workers,
a one-process script, workers sleeping or waiting for each other) while the other core idles, and the in-process
tests use one core; serially, the suite paid those gaps once per run. A test module registers each independent
run with :func:`session_run` (at import, i.e. collection); the autouse session fixture ``session_launches``
(tests/conftest.py) starts every registered run that a selected test uses, :data:`SESSION_AT_ONCE` at a time in
the order of registration (the order the tests come in), each in a thread that waits for its subprocesses. A test
reads its run's result with ``session_launches.result(name)`` (waiting if the run has not finished) and asserts on
it exactly as it did when it launched the run itself. A run's exception (a failed or timed-out launch) is raised in
the tests that use that run only. Nothing is started for a test that was not selected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.forkserver import run_with_environ

# Background runs at a time: each is one to four processes; more would only make every run slower.
SESSION_AT_ONCE = 2
# name -> (module, names of the tests that read it, run(tmp_dir)), in the order of registration.
SESSION_RUNS: dict[str, tuple[str, set[str], Callable[[Path], Any]]] = {}


class Launches:
    """Named runs started in background threads; :meth:`result` waits for one of them."""

    def __init__(self, at_once: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="launch")
        self._futures: dict[str, Future] = {}
        self._environ = dict(os.environ)  # the session's, before any test changes it (forkserver.run_with_environ)

    def start(self, name: str, run: Callable[..., Any], *args: Any) -> None:
        """Queues ``run(*args)`` under ``name`` (once: a name already started is left running); its processes get
        the environment of the session's start, whatever an in-process test sets meanwhile."""
        if name not in self._futures:
            self._futures[name] = self._pool.submit(run_with_environ, self._environ, run, *args)

    def result(self, name: str) -> Any:
        """What run ``name`` returned (waiting for it), or its exception raised here."""
        if name not in self._futures:
            raise KeyError(f"run {name!r} was not started: runs start only for selected tests that name them in "
                           f"session_run(...); started: {sorted(self._futures)}")
        return self._futures[name].result()

    def close(self) -> None:
        """Drops the runs not started yet (a session stopped early, ``-x``, reads them no more) and waits for the
        running ones (each bounds its own subprocesses with a timeout)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def session_run(name: str, *tests: str, module: str | None = None) -> Callable[[Callable[[Path], Any]], Any]:
    """Registers ``run(tmp_dir)`` as the background run ``name`` that ``tests`` read (test names, ``test_x`` or
    ``test_x[param]``, in ``module``: by default the module that defines ``run``). Use as a decorator, or call
    the result with a ``functools.partial`` (then pass ``module=__name__``)."""

    def register(run: Callable[[Path], Any]) -> Callable[[Path], Any]:
        owner = module or run.__module__
        if name in SESSION_RUNS and SESSION_RUNS[name][0] != owner:
            raise ValueError(f"two background runs are named {name!r} ({SESSION_RUNS[name][0]} and {owner}): give "
                             "each session_run a unique name")
        SESSION_RUNS[name] = (owner, set(tests), run)
        return run

    return register


def session_script(name: str, test: str, script: Path, *args: str, module: str,
                   timeout: float = 200) -> None:
    """Registers the background run ``name``, read by ``test`` in ``module``: ``python script <folder> *args``, forked
    (tests/helpers/forkserver.py) with the tests' base environment in the repository. Its result is ``(the completed
    process, the run's folder)``."""

    def run(folder: Path) -> tuple[Any, Path]:
        from tests.helpers.dist_spawn import REPO, base_env
        from tests.helpers.forkserver import run_python

        return run_python([str(script), str(folder), *args], env=base_env(), cwd=REPO, timeout=timeout), folder

    session_run(name, test, module=module)(run)


def session_launches_for(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) \
        -> Iterator[Launches]:
    """The body of the session fixture: queues the registered runs that selected tests use, yields the
    :class:`Launches` and waits for every run at the end of the session."""
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
