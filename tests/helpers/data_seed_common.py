"""The loaders of the loader-seed resume test (tests/accelerator/test_data_seed.py), shared with its child process."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

EPOCHS = 2


def make_loader() -> tuple[DataLoader, DataLoader]:
    """A shuffled loader, and one whose user batch sampler shuffles (both must resume with the saved shuffle)."""
    data = TensorDataset(torch.arange(24))
    return (DataLoader(data, batch_size=4, shuffle=True),
            DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 5, drop_last=False)))


def batches(loader: Any) -> list[list[int]]:
    return [b[0].tolist() for b in loader]


def rest_of_run(loaders: Any, epochs: int) -> list:
    """Every batch each loader yields until it has finished ``epochs`` epochs (the current one's rest included)."""
    out = []
    for loader in loaders:
        epochs_seen = []
        while loader.epoch < epochs:
            epochs_seen.append(batches(loader))
        out.append(epochs_seen)
    return out
