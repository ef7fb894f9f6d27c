"""Runs ``examples/custom_callback.py`` as a script: an EMA callback survives a crash and an exact resume."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "custom_callback.py"


def test_example_crashes_resumes_and_restores_the_callback_state(tmp_path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--root", str(tmp_path), "--epochs", "2", "--crash-at", "7"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "run 2: simulated crash after step 7" in out
    # 256 samples in batches of 32: 8 steps an epoch; the resumed run restored 6 updates from the step-6 checkpoint.
    assert re.search(r"EMA updates: 16 \(reference: 16\)", out), out
    assert "model identical to the uninterrupted run: True" in out
    assert "EMA identical to the uninterrupted run: True" in out
    assert os.path.isdir(tmp_path / "interrupted" / "checkpoints" / "last")
