"""A fit on a ``CombinedLoader`` of DataLoaders resumed mid-epoch on 2 processes, and on another process count.

On the saving process count the resumed fit ends as the uninterrupted one, bit for bit. On another count with the
same global batch (4 on each of 2 processes, 8 on one) every step trains on the samples of the uninterrupted fit's
step, and the weights match up to float rounding (1e-6, as in ``test_resume_process_count.py``). With the same
batch per process (another global batch) it continues after the samples the saving run took, where whole steps
hold them; where they do not, the resume warns. (It used to continue from the saved per-process step count,
training again on 16 samples of each loader, or skipping them, without a word.)

The worker is ``resume_combined_worker.py`` beside this file: three launches (2 processes, 1, 2), one background run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from tests.helpers.dist_spawn import run_workers
from tests.helpers.launches import Launches, session_run

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


@session_run("resume_combined", "test_a_combined_loader_resumes_bit_for_bit_on_the_saving_process_count",
             "test_a_combined_loader_resumes_on_another_process_count_with_the_same_global_batch",
             "test_a_combined_loader_resumed_with_the_same_batch_per_process_continues_after_the_samples_taken",
             "test_a_combined_loader_resumed_where_no_whole_step_holds_the_samples_taken_warns")
def _launches(out: Path) -> Path:
    for phase, processes in (("two", 2), ("one", 1), ("two-again", 2)):
        run_workers(Path(__file__).parent / "resume_combined_worker.py", [out, phase], nprocs=processes, timeout=120)
    return out


@pytest.fixture
def out(session_launches: Launches) -> Path:
    return session_launches.result("resume_combined")


def ranks(out: Path, run: str, processes: int) -> list[dict]:
    return [json.loads((out / f"{run}-rank{r}.json").read_text()) for r in range(processes)]


def global_steps(parts: list[dict]) -> dict[int, list[int]]:
    """Step -> the sample ids all processes trained on in it."""
    steps: dict[int, list[int]] = defaultdict(list)
    for rank in parts:
        for step, _, ids in rank["steps"]:
            steps[step] += ids
    return {step: sorted(ids) for step, ids in steps.items()}


def test_a_combined_loader_resumes_bit_for_bit_on_the_saving_process_count(out: Path) -> None:
    whole = ranks(out, "whole2", 2)
    for step in (4, 8):
        for full, resumed in zip(whole, ranks(out, f"whole2-{step}-on2", 2)):
            assert resumed["steps"] == full["steps"][step:]
            assert all(torch.equal(torch.tensor(a), torch.tensor(b))
                       for a, b in zip(full["weights"], resumed["weights"]))
            assert resumed["warnings"] == []


@pytest.mark.parametrize("saved, run, processes", [("whole2", "whole2-4-on1", 1), ("whole2", "whole2-8-on1", 1),
                                                   ("whole1", "whole1-6-on2", 2)])
def test_a_combined_loader_resumes_on_another_process_count_with_the_same_global_batch(out, saved, run, processes):
    whole = global_steps(ranks(out, saved, 3 - processes))
    resumed = ranks(out, run, processes)
    first = int(run.split("-")[1])
    assert global_steps(resumed) == {step: ids for step, ids in whole.items() if step >= first}
    assert resumed[0]["warnings"] == []
    reference = ranks(out, saved, 3 - processes)[0]["weights"]
    for rank in resumed:
        torch.testing.assert_close(torch.tensor(rank["weights"]), torch.tensor(reference), rtol=0, atol=1e-6)


def test_a_combined_loader_resumed_with_the_same_batch_per_process_continues_after_the_samples_taken(out):
    """Batches of 4 on one process where two took 4 each: the rest of the epoch is the saving run's, in its order
    (each step of two processes is two steps here)."""
    by_rank = [rank["steps"] for rank in ranks(out, "whole2", 2)]
    saved = [ids for steps in zip(*by_rank) for step, epoch, ids in steps if step >= 4 and epoch == 0]
    [resumed] = ranks(out, "whole2-4-on1-batch4", 1)
    assert [ids for step, epoch, ids in resumed["steps"] if epoch == 0] == saved
    assert resumed["steps"][0][0] == 4 and resumed["warnings"] == []


def test_a_combined_loader_resumed_where_no_whole_step_holds_the_samples_taken_warns(out: Path) -> None:
    for rank in ranks(out, "whole1b-3-on2", 2):
        [message] = rank["warnings"]
        for part in ("epoch 0", "cannot be continued exactly",
                     "were [[4, 10], [4, 6]] when it was saved and are [[8, 5], [8, 3]] now", "continues after 1 steps",
                     "Resume from a checkpoint of an epoch's end, or on the process count and batch sizes"):
            assert part in message, message
