"""The Trainer examples run end to end on a tiny setting: a generated sample, checkpoints, logs, resume."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_char_lm_tiny(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    char_lm = load("char_lm")
    char_lm.main(["--tiny", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert "6 optimizer steps" in out and "--- sample ---\ndef " in out, out
    assert re.search(r"--- finished in \d+\.\d s \(\d+\.\d s CPU, \d+ threads\)", out), out  # prints its time
    ppl, vocab = (float(out.split("validation perplexity ")[1].split()[0]),
                  int(out.split("uniform guessing: ")[1].split(")")[0]))
    assert 1.0 < ppl < vocab  # better than guessing after six bf16 steps
    logs = tmp_path / "stoker_logs" / "version_0"  # the run's checkpoints live under its log version
    assert os.path.isfile(logs / "checkpoints" / "last.ckpt" / "model.safetensors")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(logs))
    char_lm.main(["--tiny", "--root", str(tmp_path), "--resume"])  # already at max_steps: resumes, no new steps
    assert "6 optimizer steps" in capsys.readouterr().out


def test_train_regression(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    regression = load("train_regression")
    loss = regression.main(["--root", str(tmp_path), "--epochs", "8", "--samples", "256"])
    assert loss < 1.0 and "epoch 8, 56 steps" in capsys.readouterr().out
    regression.main(["--root", str(tmp_path), "--epochs", "9", "--samples", "256"])  # resumes from `last`
    assert "epoch 9, 63 steps" in capsys.readouterr().out

