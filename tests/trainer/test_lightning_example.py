"""Runs ``examples/lightning_style.py``: DataModule, model summary, ckpt_path="best" and load_from_checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.helpers.forkserver import run_python

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_lightning_style_example(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = run_python([str(ROOT / "examples" / "lightning_style.py"), "--root", str(tmp_path), "--epochs", "3"],
                      env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Trainable params" in done.stdout and "accumulation: 2" in done.stdout  # the model summary
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["global_step"] == 3 * 7  # 420 samples / 32 = 14 batches, accumulate 2
    assert isinstance(result["best_model_score"], float)
    # test(ckpt_path="best") and the module rebuilt by load_from_checkpoint see the same (best) weights
    assert result["test_acc"] == result["reloaded_test_acc"] > 0.8
    assert result["hidden"] == 32
    checkpoints = tmp_path / "stoker_logs" / "version_0" / "checkpoints"  # the run's folder (logger="csv")
    names = sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith("."))
    assert len(names) == 2 and all(n.endswith(".ckpt") for n in names)  # save_top_k=2; no `last` unless asked
