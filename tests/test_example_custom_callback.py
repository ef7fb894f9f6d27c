"""Runs ``examples/custom_callback.py`` as a script: an EMA callback survives a crash and an exact resume."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.helpers.launches import Launches, session_run
from tests.helpers.forkserver import run_python

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "custom_callback.py"


@session_run("custom_callback", "test_example_crashes_resumes_and_restores_the_callback_state")
def _run_example(tmp: Path) -> tuple[subprocess.CompletedProcess, Path]:
    return run_python([str(SCRIPT), "--root", str(tmp), "--epochs", "2", "--crash-at", "7"], timeout=300), tmp


def test_example_crashes_resumes_and_restores_the_callback_state(session_launches: Launches) -> None:
    """The script run in a subprocess started with the other example scripts' (``tests/helpers/launches.py``)."""
    proc, tmp_path = session_launches.result("custom_callback")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "run 2: simulated crash after step 7" in out
    # 256 samples in batches of 32: 8 steps an epoch; the resumed run restored 6 updates from the step-6 checkpoint.
    assert re.search(r"EMA updates: 16 \(reference: 16\)", out), out
    assert "model identical to the uninterrupted run: True" in out
    assert "EMA identical to the uninterrupted run: True" in out
    assert os.path.isdir(tmp_path / "interrupted" / "checkpoints" / "last.ckpt")
