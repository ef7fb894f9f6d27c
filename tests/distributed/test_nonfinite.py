"""A non-finite loss on one rank only: every rank raises, or skips, at the same step (no rank left waiting).

The two modes are two independent 2-process launches, run in the background (``tests/helpers/launches.py``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_run
from tests.helpers.dist_spawn import run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]
MODES = ("raise", "skip")


def _run(out: Path, mode: str) -> list[dict]:
    run_workers("nonfinite_worker.py", [out, mode], timeout=300)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


TEST = "test_a_nan_loss_on_one_rank_is_acted_on_by_every_rank"
for _mode in MODES:
    session_run(f"nonfinite_{_mode}", f"{TEST}[{_mode}]", module=__name__)(functools.partial(_run, mode=_mode))


@pytest.mark.parametrize("mode", MODES)
def test_a_nan_loss_on_one_rank_is_acted_on_by_every_rank(session_launches: Launches, mode: str) -> None:
    results = session_launches.result(f"nonfinite_{mode}")
    if mode == "raise":
        for r in results:
            assert "global_step 1 (epoch 0, batch_idx 1) was not finite" in r.get("error", ""), r.get("error")
        assert results[0]["global_step"] == results[1]["global_step"] == 4  # noticed at the first epoch's end
    else:
        assert [len(r["warnings"]) for r in results] == [1, 0], [r["warnings"] for r in results]  # rank 0 says it
        assert "global_step 1 (epoch 0, batch_idx 1)" in results[0]["warnings"][0]
        assert [r["global_step"] for r in results] == [7, 7]  # 2 epochs of 4 steps, one skipped by both ranks
        assert all(r["finite"] for r in results)
        assert results[0]["weights"] == results[1]["weights"]
