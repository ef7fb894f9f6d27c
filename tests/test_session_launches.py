"""The test suite's background runs (``tests/helpers/launches.py``) start their processes with the environment of
the session's start: an in-process test's ``monkeypatch.setenv`` must not reach them. (One CI run failed 40 of
Accelerate's two-process cases when ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS=3``, set by an in-process test, was
inherited by workers a background thread forked at that moment.)"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.dist_spawn import base_env
from tests.helpers.forkserver import parent_environ, run_python
from tests.helpers.launches import Launches

PRINT = ["-c", "import os; print(os.environ.get('STOKER_SESSION_PROBE'))"]


def test_a_background_run_gets_the_environment_of_the_sessions_start(monkeypatch, tmp_path: Path) -> None:
    launches = Launches(1)  # as the session fixture builds it, before any test runs
    monkeypatch.setenv("STOKER_SESSION_PROBE", "set by a test")
    try:
        launches.start("probe", lambda folder: (run_python(PRINT).stdout.strip(),
                                                run_python(PRINT, env=base_env()).stdout.strip()), tmp_path)
        assert launches.result("probe") == ("None", "None")
    finally:
        launches.close()
    assert parent_environ()["STOKER_SESSION_PROBE"] == "set by a test"  # the test's own processes do get it
    assert run_python(PRINT).stdout.strip() == "set by a test"
