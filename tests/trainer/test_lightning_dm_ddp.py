"""datamodule= in two processes: prepare_data once (per node: the local main process), setup/teardown on each."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env
from tests.helpers.forkserver import run_python
from tests.helpers.launches import Launches, session_run

SCRIPT = Path(__file__).with_name("lightning_dm_ddp_script.py")


@session_run("datamodule_ddp", "test_datamodule_in_two_processes")
def _launch(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    return run_python([str(SCRIPT), str(tmp_path), "per_node"], env=base_env(), cwd=REPO, timeout=200), tmp_path


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_datamodule_in_two_processes(session_launches: Launches) -> None:
    done, tmp_path = session_launches.result("datamodule_ddp")  # a background run of the session
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "prepared.txt").read_text().split() == ["0", "0"]  # once per call, on rank 0 only
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for record in ranks:
        assert record["global_step"] == 4  # 64 samples / batch 8 / 2 processes
        assert record["stages"] == ["setup:fit", "teardown:fit", "setup:validate", "teardown:validate"]
        assert record["val"] == ["val/loss"]
