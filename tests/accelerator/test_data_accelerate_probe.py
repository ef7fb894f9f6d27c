"""What the differential probe of the data path (Accelerate 1.16 against stoker, one process) found missing:
``gradient_state.remainder`` / ``loader.remainder``, and ``skip_first_batches`` (or a loop left with ``break``)
on a loader over an ``IterableDataset``, which started the stream again from its first batch."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from stoker import Accelerator, skip_first_batches


class _Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(self.n))


def _remainders(accelerator: Accelerator, loader: DataLoader) -> list[tuple[int, int]]:
    prepared = accelerator.prepare(loader)
    return [(accelerator.gradient_state.remainder, prepared.remainder) for _ in prepared]


def test_remainder_counts_the_samples_of_the_last_step() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.gradient_state.remainder == -1  # outside a loop
    assert _remainders(accelerator, DataLoader(torch.arange(10), batch_size=3)) == [(1, 1)] * 4
    assert _remainders(accelerator, DataLoader(torch.arange(11), batch_size=3)) == [(2, 2)] * 4
    assert _remainders(accelerator, DataLoader(torch.arange(9), batch_size=3)) == [(0, 0)] * 3
    assert accelerator.gradient_state.remainder == -1
    assert "Extra samples added: -1" in repr(accelerator.gradient_state)


def test_remainder_is_minus_one_where_the_last_step_is_not_known() -> None:
    accelerator = Accelerator(cpu=True)
    assert _remainders(accelerator, DataLoader(torch.arange(10), batch_size=3, drop_last=True)) == [(-1, -1)] * 3
    assert _remainders(accelerator, DataLoader(_Stream(10), batch_size=3)) == [(-1, -1)] * 4
    # a batch sampler of the user's that drops its short batch: Accelerate says 1 here (and cuts [6, 7, 8] to [6])
    dropping = BatchSampler(SequentialSampler(range(10)), 3, drop_last=True)
    assert _remainders(accelerator, DataLoader(torch.arange(10), batch_sampler=dropping)) == [(-1, -1)] * 3


def test_skip_first_batches_of_an_iterable_dataset_skips_them() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(_Stream(10), batch_size=3))
    skipped = skip_first_batches(loader, 2)
    assert [b.tolist() for b in skipped] == [[6, 7, 8], [9]]
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # the next epoch is whole


def test_a_loop_over_an_iterable_dataset_left_with_break_continues_its_epoch() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(_Stream(10), batch_size=3))
    for batch in loader:
        if batch[0] == 3:
            break
    assert [b.tolist() for b in loader] == [[6, 7, 8], [9]]  # as a map-style loader does (the migrating guide)
    assert accelerator.gradient_state.remainder == -1
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
