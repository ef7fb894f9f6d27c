"""``gather_for_metrics`` at the end of an epoch keeps as many rows as the dataset has samples in that last step,
whatever a row holds: per-sample predictions, and also one value per batch repeated to the batch size (the eval loss
of ``run_clm_no_trainer.py``: ``gather_for_metrics(loss.repeat(batch_size))``), so its mean weighs every sample once.
Measured against Accelerate 1.16, in one process and in two."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator
from tests.helpers.dist_spawn import read_results, run_workers


def test_repeated_batch_values_are_cut_to_the_dataset_in_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(11).float()), batch_size=4))
    losses, objects = [], []
    for (x,) in loader:
        losses.append(accelerator.gather_for_metrics(x.mean().repeat(4)))
        objects += accelerator.gather_for_metrics([x.shape[0]] * 4, use_gather_object=True)
    losses = torch.cat(losses)
    assert len(losses) == len(objects) == 11  # the last batch holds 3 samples: 4 + 4 + 3
    assert losses.mean().item() == pytest.approx(torch.arange(11).float().mean().item())
    assert objects[-3:] == [3, 3, 3]


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_repeated_batch_values_are_cut_to_the_dataset_in_two_processes(tmp_path: Path) -> None:
    run_workers(Path(__file__).parent / "accelerate_diff_metrics_worker.py", [tmp_path], nprocs=2, timeout=150)
    for rank in read_results(tmp_path):
        for key, found in rank.items():
            samples = int(key.split("_")[0])
            assert sorted(found["ids"]) == list(range(samples)), key  # padding dropped, every sample once
            assert len(found["repeated"]) == len(found["objects"]) == samples, key
            # split_batches cuts each batch of 4 in two: the total is still 4 (8 when each process reads 4)
            assert found["total_batch_size"] == (4 if key.endswith("split") else 8), key
