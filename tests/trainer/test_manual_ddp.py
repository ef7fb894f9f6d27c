"""Manual optimization in two processes (DDP): each optimizer's gradients are averaged before its step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_script

SCRIPT = Path(__file__).with_name("manual_ddp_script.py")


session_script("manual_ddp", "test_two_optimizers_in_two_processes_stay_identical", SCRIPT, module=__name__)


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_two_optimizers_in_two_processes_stay_identical(session_launches: Launches) -> None:
    done, tmp_path = session_launches.result("manual_ddp")  # a background run of the session
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["global_step"] for r in ranks] == [8, 8]  # 64 samples / batch 8 / 2 processes, two steps per batch
    assert ranks[0]["first_batch"] != ranks[1]["first_batch"]  # each process trained on its own share
    assert ranks[0]["weights"] == ranks[1]["weights"]  # so only averaged gradients keep them equal
