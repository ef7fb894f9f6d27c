"""Runs ``examples/accelerator_resume.py``: stopped half-way and resumed in a new process, it ends with the weights of
the uninterrupted run, exported as safetensors shards that load back."""

from __future__ import annotations

import json
import re
from pathlib import Path

from safetensors.torch import load_file

from tests.helpers.dist_spawn import base_env
from tests.helpers.launches import Launches, session_run
from tests.helpers.forkserver import ForkedProcess, popen_python

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "accelerator_resume.py"


def start(project_dir: Path, *extra: str) -> ForkedProcess:
    return popen_python([str(SCRIPT), "--project-dir", str(project_dir), "--cpu", *extra], env=base_env(),
                        merge_stderr=True)


def output(proc: ForkedProcess) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return out


@session_run("accelerator_resume", "test_example_stops_resumes_and_matches_the_uninterrupted_run")
def _run_example(tmp_path: Path) -> tuple[Path, str, str, str]:
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    full, stopped = start(full_dir), start(resumed_dir, "--stop-at-step", "9")  # two at once
    full_out, stopped_out = output(full), output(stopped)
    return tmp_path, full_out, stopped_out, output(start(resumed_dir))


def test_example_stops_resumes_and_matches_the_uninterrupted_run(session_launches: Launches) -> None:
    """The runs in subprocesses started with the other example scripts' (``tests/helpers/launches.py``)."""
    tmp_path, full_out, stopped_out, resumed_out = session_launches.result("accelerator_resume")
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    assert "stopping at step 9: saved" in stopped_out and "weights digest" not in stopped_out
    assert "resumed at step 9, epoch 1; next checkpoint: checkpoint_3" in resumed_out
    digests = [re.search(r"weights digest: (\w+)", out).group(1) for out in (full_out, resumed_out)]
    assert digests[0] == digests[1]
    assert "steps: 24, losses recorded: 24" in resumed_out
    # total_limit=2 kept exactly the newest two automatic checkpoints, numbered on after the resume.
    assert sorted(p.name for p in (resumed_dir / "checkpoints").iterdir()) == ["checkpoint_5", "checkpoint_6"]
    export = resumed_dir / "export"
    index = json.loads((export / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded at 2KB
    full_index = json.loads((full_dir / "export" / "model.safetensors.index.json").read_text())
    full_weights = {k: load_file(full_dir / "export" / f)[k] for k, f in full_index["weight_map"].items()}
    for key, file in index["weight_map"].items():  # shards readable by safetensors alone, bit-identical
        assert load_file(export / file)[key].equal(full_weights[key]), key
