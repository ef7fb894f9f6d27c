"""datamodule= in two processes: prepare_data once (per node: the local main process), setup/teardown on each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_script

SCRIPT = Path(__file__).with_name("lightning_dm_ddp_script.py")


session_script("datamodule_ddp", "test_datamodule_in_two_processes", SCRIPT, "per_node", module=__name__)


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
