"""A non-finite loss on one rank only: every rank raises, or skips, at the same step (no rank left waiting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]


def _results(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_a_nan_loss_on_one_rank_is_acted_on_by_every_rank(tmp_path: Path, mode: str) -> None:
    run_workers("nonfinite_worker.py", [tmp_path, mode], timeout=180)
    results = _results(tmp_path)
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
