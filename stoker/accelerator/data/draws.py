"""What iterating a user's ``DataLoader`` draws from the global RNG, drawn by the prepared loader at the same points
(``GlobalDraws``), so that a prepared loop's dropout sees the numbers of a plain PyTorch loop."""

from __future__ import annotations

import torch


class GlobalDraws:
    """What iterating the user's own ``DataLoader`` draws from the global RNG at each epoch's start, drawn (and
    discarded) by the prepared loader at the same points, so that dropout and other global-RNG users see the same
    numbers as in a plain PyTorch or Lightning loop, in every epoch.

    A plain loader draws its workers' base seed from the global RNG each time it is iterated (once only with
    persistent workers), unless it has a ``generator``; a ``RandomSampler`` without a generator draws its shuffle
    seed too. The prepared loader takes its shuffle and worker seeds from its own generator instead (exact
    mid-epoch resume), so it draws these numbers only to keep the global RNG in step. The shuffle seed that
    ``prepare`` draws from the global RNG counts as the first epoch's first draw. An epoch continued (a restored
    position, a loop left early) draws nothing: the run that saved that position drew at the epoch's start, and
    ``load_state`` restores the RNG states from after it. ``Accelerate`` draws at every iteration instead.

    Args:
        base: The user's loader had no generator (its base seed came from the global RNG).
        sampler: Its ``RandomSampler`` without a generator was replaced by the loader's seeded one.
        persistent: Its workers are persistent (the base seed is drawn at the first iteration only).
        prepaid: Draws already made by ``prepare`` (the shuffle seed, when ``data_seed`` is not set).
    """

    def __init__(self, base: bool = False, sampler: bool = False, persistent: bool = False, prepaid: int = 0) -> None:
        self.base, self.sampler, self.persistent, self.prepaid = base, sampler, persistent, prepaid
        self._base_drawn = False

    def epoch_started(self) -> None:
        count = int(self.sampler)
        if self.base and not (self.persistent and self._base_drawn):
            count += 1
            self._base_drawn = True
        count, self.prepaid = max(count - self.prepaid, 0), 0
        for _ in range(count):
            torch.empty((), dtype=torch.int64).random_()  # what torch's DataLoader and RandomSampler draw

    def restored(self) -> None:
        """A position was loaded: the global RNG comes from the checkpoint, so prepare's draw no longer counts."""
        self.prepaid = 0
        self._base_drawn = True  # persistent workers: the saved run had iterated already
