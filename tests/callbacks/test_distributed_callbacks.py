"""Callbacks in two processes that disagree: the ranks must still decide alike (see the worker's docstring)."""

from __future__ import annotations

import os

import pytest

from tests.helpers.dist_spawn import read_results, run_workers
from tests.helpers.launches import session_run

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]
WORKER = os.path.join(os.path.dirname(__file__), "dist_callbacks_worker.py")


@session_run("distributed_callbacks", "test_checkpoint_early_stopping_and_timer_agree_across_ranks")
def _launch(tmp_path):
    run_workers(WORKER, [tmp_path], timeout=150)
    return tmp_path


def test_checkpoint_early_stopping_and_timer_agree_across_ranks(session_launches):
    tmp_path = session_launches.result("distributed_callbacks")  # a background run of the session
    results = read_results(tmp_path)
    assert results[0] == results[1]
    result = results[0]
    # Mean scores 4.0, 2.0, 2.75, 3.1, 3.5: best at epoch 1; patience 2 ends the run after epoch 3.
    assert (result["best"], result["best_score"]) == ("epoch=1.ckpt", 2.0)
    assert (result["stopped_epoch"], result["steps"]) == (3, 16)
    assert sorted(os.listdir(tmp_path / "stop" / "checkpoints")) == ["epoch=1.ckpt", "last.ckpt"]
    # Rank 1 passes the duration at step 9 (mid-epoch); both stop at the next agreement point, step 10.
    assert result["timer_stopped"] and result["timer_steps"] == 10
    # Predict: 10 rows in batches of 3, shuffled; 4 batches, two per rank, the last one short (prediction loaders are
    # not padded, as in Lightning: each row is predicted once), each batch's batch_indices matching its rows on both
    # ranks, together covering every row.
    matched, indices = result["predict"]
    assert matched and len(indices) == 10 and sorted(indices) == list(range(10))
    # ModelPruning (random_unstructured, 30% at each epoch's end): the same weights and masks on both ranks (the
    # results are equal as a whole above), pruned, and the same after resuming from step 6 (inside epoch 1).
    whole = result["pruned_whole"]
    assert whole == result["pruned_resumed"] and whole.count(0.0) > 0
