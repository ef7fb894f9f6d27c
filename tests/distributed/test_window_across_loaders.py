"""Windows that run across loader ends (``sync_with_dataloader=False``) in two processes (DDP, gloo): the same
weights, bit for bit, as torch's DDP driven by hand, and an exact resume from inside a window at an epoch's end.

One launch of ``tests/helpers/window_across_worker.py`` runs every check; the tests read what each rank saw.
"""

from __future__ import annotations

import pytest

from tests.helpers.dist_spawn import read_results, run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("window_across")
    run_workers("window_across_worker.py", [out], nprocs=2, timeout=150)
    return read_results(out)


def test_windows_close_every_third_micro_batch_across_the_epoch_end(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["stoker"]["sync"] == [i % 3 == 2 for i in range(10)]
        assert r["stoker"]["end"] == [i % 5 == 4 for i in range(10)]
        assert r["stoker"]["step"] == 3


def test_weights_equal_a_hand_written_ddp_loop_bit_for_bit(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["stoker"]["x"] == r["plain"]["x"]  # the same batches on this rank
        assert r["stoker"]["weights"] == r["plain"]["weights"]
        assert r["stoker"]["grads"] == r["plain"]["grads"]  # the open last window: this process's own gradients
    assert ranks[0]["stoker"]["weights"] == ranks[1]["stoker"]["weights"]
    assert ranks[0]["stoker"]["grads"] != ranks[1]["stoker"]["grads"]  # not synced: the window never closed


def test_a_run_saved_inside_a_window_at_the_epochs_end_resumes_exactly(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["stopped"]["sync"] == [False, False, True, False, False]  # saved with two micro-batches in
        assert r["stopped"]["x"] + r["resumed"]["x"] == r["stoker"]["x"]
        assert r["resumed"]["weights"] == r["stoker"]["weights"]
        assert r["resumed"]["grads"] == r["stoker"]["grads"]
