"""Resuming on another process count (1 -> 2, 2 -> 1, 2 -> 2): every sample of the interrupted epoch is trained on
exactly once, the loop's counters continue right, and where the global batch is the same on both sides the final
weights are an uninterrupted run's.

Three launches (2 processes, 1, 2) run every case of ``tests/helpers/resume_count_worker.py``: the Accelerator loop
and the Trainer; shuffled map-style data and an iterable dataset; DDP and FSDP2 (on CPU/gloo); ``split_batches`` and
per-process batch sizes scaled to keep the global batch (8), or kept (then the global batch changes).

Weights tolerance: 1e-6 (absolute, on weights of order 1 after 12 SGD steps). A step on 2 processes averages two
per-process mean gradients over 4 samples each, where one process takes the mean over 8: the same sum in another
order, so float32 rounding differs in the last bits (about 6e-8 measured); anything that trained on other samples
would differ by 1e-2 or more.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from stoker.accelerator import load_tree
from stoker.accelerator.checkpointing.process_count import derive_rng_state
from tests.helpers.dist_spawn import run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

N = 48
CASES = ["acc-map-split", "acc-map-scaled", "acc-map-same", "acc-iter-scaled", "acc-iter-same", "acc-fsdp",
         "trainer-map",
         "trainer-map-same", "trainer-iter"]
SAME_GLOBAL_BATCH = [c for c in CASES if not c.endswith("same")]
MOVES = [("save21", "resume21", 2, 1), ("save12", "resume12", 1, 2)]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("resume_count")
    for phase, n in (("two-a", 2), ("one", 1), ("two-b", 2)):
        run_workers("resume_count_worker.py", [folder, phase], nprocs=n, timeout=120)
    return folder


def runs(out: Path, case: str, what: str, n: int) -> list[dict]:
    return [json.loads((out / f"{case}-{what}-rank{r}.json").read_text()) for r in range(n)]


def seen_in_epoch(parts: list[dict], epoch: int) -> Counter:
    seen: Counter = Counter()
    for rank in parts:
        seen.update(rank["seen"].get(str(epoch), []))
    return seen


def moves(case: str) -> list[tuple[str, str, int, int]]:
    same_count = [("save22", "resume22", 2, 2)] if case in ("acc-map-scaled", "trainer-map") else []
    return MOVES + same_count


@pytest.mark.parametrize("case", CASES)
def test_every_sample_of_the_interrupted_epoch_is_seen_exactly_once(out: Path, case: str) -> None:
    for save, resume, before, after in moves(case):
        first, second = runs(out, case, save, before), runs(out, case, resume, after)
        seen = seen_in_epoch(first + second, epoch=1)
        repeated = sorted(i for i, k in seen.items() if k > 1)
        assert sorted(seen.elements()) == list(range(N)), (
            f"{case} {before} -> {after}: repeated {repeated}, missing {sorted(set(range(N)) - set(seen))}")
        assert all("0" not in r["seen"] for r in second), "the finished epoch is not replayed"


@pytest.mark.parametrize("case", SAME_GLOBAL_BATCH)
def test_the_final_weights_are_an_uninterrupted_runs(out: Path, case: str) -> None:
    reference = runs(out, case, "ref", 1)[0]
    for save, resume, before, after in moves(case):
        resumed = runs(out, case, resume, after)
        for rank in resumed:
            assert rank["step"] == reference["step"] == 12
            torch.testing.assert_close(torch.tensor(rank["weights"]), torch.tensor(reference["weights"]),
                                       rtol=0, atol=1e-6, msg=f"{case} {before} -> {after}")


def test_the_trainer_continues_its_batch_index_at_this_process_count(out: Path) -> None:
    # 24 samples of the second epoch were done: 3 batches of 8 (one process) or 3 of 4 on each of two
    for case in ("trainer-map", "trainer-iter"):
        for _, resume, _, after in moves(case):
            assert [r["batch_idx"] for r in runs(out, case, resume, after)] == [{"1": [3, 4, 5]}] * after
    # the same per-process batch of 4: one process has 6 batches done, two processes 3 each
    assert [r["batch_idx"] for r in runs(out, "trainer-map-same", "resume21", 1)] == [{"1": [6, 7, 8, 9, 10, 11]}]
    assert [r["batch_idx"] for r in runs(out, "trainer-map-same", "resume12", 2)] == [{"1": [3, 4, 5]}] * 2
    assert [r["step"] for r in runs(out, "trainer-map-same", "resume21", 1)] == [9 + 6]
    assert [r["epoch"] for r in runs(out, "trainer-map-same", "resume12", 2)] == [2, 2]


def test_a_process_that_did_not_exist_derives_its_rng_from_the_main_processs_and_its_rank(out: Path) -> None:
    ranks = runs(out, "acc-map-split", "resume12", 2)
    saved = load_tree(str(out / "ckpt-acc-map-split-1to2" / "random_states_0.safetensors"))
    with torch.random.fork_rng(devices=[]):
        derive_rng_state(saved, 1)
        expected = torch.rand(1).item()
    assert ranks[1]["rng"] == expected
    assert ranks[0]["rng"] != ranks[1]["rng"]  # not a copy of the main process's: dropout differs between ranks


def test_a_batch_that_cannot_continue_the_position_is_refused_before_anything_changes(out: Path) -> None:
    [result] = runs(out, "acc-map-split", "refuse21", 1)
    assert result["error"] == "ProcessCountError"
    message = result["message"]
    for part in ("saved by 2 process(es) and this run has 1", "24 samples of epoch 1", "inner batch size 16",
                 "Resume with 2 processes", "dataloader.safetensors"):
        assert part in message, message
    assert result["unchanged"] and result["step"] == 0 and result["epoch"] == 0
