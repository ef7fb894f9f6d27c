"""Manual optimization in two processes (DDP): each optimizer's gradients are averaged before its step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env
from tests.helpers.forkserver import run_python
from tests.helpers.launches import Launches, session_run

SCRIPT = Path(__file__).with_name("manual_ddp_script.py")


@session_run("manual_ddp", "test_two_optimizers_in_two_processes_stay_identical")
def _launch(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    return run_python([str(SCRIPT), str(tmp_path)], env=base_env(), cwd=REPO, timeout=200), tmp_path


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_two_optimizers_in_two_processes_stay_identical(session_launches: Launches) -> None:
    done, tmp_path = session_launches.result("manual_ddp")  # a background run of the session
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["global_step"] for r in ranks] == [8, 8]  # 64 samples / batch 8 / 2 processes, two steps per batch
    assert ranks[0]["first_batch"] != ranks[1]["first_batch"]  # each process trained on its own share
    assert ranks[0]["weights"] == ranks[1]["weights"]  # so only averaged gradients keep them equal
