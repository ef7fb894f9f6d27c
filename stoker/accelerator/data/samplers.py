"""Which indices a prepared loader reads, on which process: the samplers ``prepare`` builds around a user's own.

Owns: a shuffle whose order depends only on (seed, epoch), the split of each epoch's batches between processes
(round-robin or sliced, padded to even lengths), and starting an epoch some batches in without loading them.
Does not own: iteration, device placement or the saved position (``loader.py``), nor rebuilding a user's
``DataLoader`` (``prepare.py``).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler


class SeedableRandomSampler(Sampler[int]):
    """A random permutation that depends only on ``seed + epoch`` (identical on every process)."""

    def __init__(self, num_items: int, seed: int, num_samples: int | None = None, replacement: bool = False):
        self.num_items = num_items
        self.seed = seed
        self.epoch = 0
        self.num_samples = num_items if num_samples is None else num_samples
        self.replacement = replacement

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        if self.replacement:
            yield from torch.randint(self.num_items, (self.num_samples,), generator=g).tolist()
            return
        full, rest = divmod(self.num_samples, self.num_items)
        for _ in range(full):
            yield from torch.randperm(self.num_items, generator=g).tolist()
        if rest:
            yield from torch.randperm(self.num_items, generator=g)[:rest].tolist()

    def __len__(self) -> int:
        return self.num_samples


def seedable(sampler: Any, seed: int) -> Any:
    """``sampler`` with a plain ``RandomSampler`` replaced by a :class:`SeedableRandomSampler` of ``seed``: the
    sampler itself, or the one inside a ``BatchSampler`` (then a shallow copy; the user's object is not changed).
    Anything else is returned as it is."""
    if type(sampler) is RandomSampler:
        return SeedableRandomSampler(len(sampler.data_source), seed, sampler._num_samples, sampler.replacement)
    if isinstance(sampler, BatchSampler) and type(sampler.sampler) is RandomSampler:
        rebuilt = copy.copy(sampler)
        rebuilt.sampler = seedable(sampler.sampler, seed)
        return rebuilt
    return sampler


@contextlib.contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """Runs the block with torch's CPU generator and Python's ``random`` seeded from ``seed``, then puts both back:
    a user's sampler drawing from them gives the same order on every process and leaves the global RNG alone."""
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)


def split_batch_size(batch_size: int | None, num_processes: int) -> int | None:
    """Each process's slice of a batch under ``split_batches=True`` (None: no batching); refuses a batch size
    the processes cannot share evenly."""
    if batch_size is None:
        return None
    if batch_size % num_processes:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True) needs a batch size divisible by the {num_processes} "
            f"processes; got batch_size={batch_size}. Change the batch size or use split_batches=False."
        )
    return batch_size // num_processes


def _samples(indices: list[Any]) -> int:
    """Samples behind ``indices``: one per index, or a whole list's worth where an index is itself a batch
    (``sampler=BatchSampler(...), batch_size=None``: the dataset reads a list of indices at once)."""
    return sum(len(i) if isinstance(i, (list, tuple)) else 1 for i in indices)


class ShardedBatchSampler(Sampler[list[int]]):
    """Gives this process its share of each epoch's batches and can start an epoch ``skip`` inner batches in (counted
    over all processes, so that a position means the same on any process count).

    Several processes: whole batches go round-robin (``split_batches=False``: process p gets batches p, p+n, ...)
    or each batch is cut into n equal slices (``split_batches=True``). With ``even_batches`` the epoch is padded
    with samples from its start so every process gets the same number of full batches; ``padding`` counts the
    repeated samples so ``gather_for_metrics`` can drop them. An inner batch sampler with ``drop_last`` (the
    loader's ``drop_last=True``) asked for full batches only: the last round, when fewer batches are left than
    processes, is dropped instead of padded (as Accelerate, and as Lightning's per-process loaders drop theirs).

    Every epoch starts with :meth:`set_epoch`, which passes the loader's seed to the seedable samplers inside; in
    several processes a user's own sampler is drawn with the global RNG seeded from (seed, epoch), so every process
    sees the same order before taking its share.
    """

    def __init__(self, inner: Any, num_shards: int = 1, shard: int = 0, even_batches: bool = True,
                 split_batches: bool = False) -> None:
        self.inner = inner
        self.num_shards = num_shards
        self.shard = shard
        self.even_batches = even_batches
        self.split_batches = split_batches
        self.skip = 0
        self.padding = 0
        self.seed = 0
        self.epoch = 0
        self.recorded: list[Any] | None = None  # a list: each batch handed out is appended (predict's batch_indices)

    @property
    def batch_sampler(self) -> Any:
        """The batch sampler being sharded (the user's own, or one built on the loader's sampler); Accelerate's
        name for it."""
        return self.inner

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """Chooses the epoch and, when given, the seed of the shuffles inside (the loader's, which a restored
        position brings back)."""
        self.epoch = epoch
        if seed is not None:
            self.seed = seed
        for s in self._samplers():
            if seed is not None and isinstance(s, SeedableRandomSampler):
                s.seed = seed
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    def _samplers(self) -> Iterator[Any]:
        """The batch sampler inside and the samplers it wraps (``.sampler`` of ``.sampler``, a few levels deep)."""
        s = self.inner
        for _ in range(4):
            if s is None:
                return
            yield s
            s = getattr(s, "sampler", None)

    def _batch_size(self) -> int | None:
        return getattr(self.inner, "batch_size", None)

    def _drops_last(self) -> bool:
        """Whether whole batches are dealt out and the inner sampler drops a short last batch: then a short last
        round of batches is dropped too (every batch of the epoch is a full one, none repeated)."""
        return not self.split_batches and getattr(self.inner, "drop_last", False) is True

    def _my_batches(self, skip: int) -> Iterator[Any]:
        """This process's batches of the epoch after the first ``skip`` inner batches (all processes together).

        The rest of the epoch is padded for the current process count, with the padding taken from the whole
        epoch as without a skip: a resume on as many processes as the save gives the batches it gave unskipped.
        """
        if self.num_shards == 1:
            yield from itertools.islice(self.inner, skip, None)
            return
        with seeded_global_rng(self.seed + self.epoch):  # a user's sampler may draw from the global RNG
            batches = [list(b) for b in self.inner]
        n, p = self.num_shards, self.shard
        if self.split_batches:
            yield from self._split(batches, skip)
            return
        rest = batches[skip:len(batches) - len(batches) % n] if self._drops_last() else batches[skip:]
        if self.even_batches and rest:
            full = self._batch_size() or len(batches[0])
            flat = [i for b in batches for i in b]
            if len(rest[-1]) < full:  # complete a short last batch with samples from the epoch's start
                need = full - len(rest[-1])
                added = (flat * (need // len(flat) + 1))[:need]
                rest[-1] = rest[-1] + added
                self.padding += _samples(added)
            for k in range((-len(rest)) % n):
                start = (k * full) % len(flat)
                rest.append((flat * (full // len(flat) + 2))[start:start + full])
                self.padding += _samples(rest[-1])
        yield from rest[p::n]

    def _split(self, batches: list[list[Any]], skip: int) -> Iterator[Any]:
        """``split_batches``: this process's slice of each batch after the first ``skip``. With ``even_batches``
        a short last batch is first completed to the batch size with samples from the epoch's start, as
        Accelerate does (so every process gets ``batch_size / n`` samples); a batch that still does not divide
        (a batch sampler of the user's) repeats its own samples."""
        n, p, full = self.num_shards, self.shard, self._batch_size()
        for k, b in enumerate(batches[skip:], skip):
            if self.even_batches and full and k == len(batches) - 1 and len(b) < full:
                flat = [i for batch in batches for i in batch]
                added = (flat * (full // len(flat) + 1))[: full - len(b)]
                self.padding += _samples(added)
                b = b + added
            size = math.ceil(len(b) / n)
            if self.even_batches and len(b) < size * n:
                added = (b * n)[: size * n - len(b)]
                self.padding += _samples(added)
                b = b + added
            yield b[p * size:(p + 1) * size]

    def __iter__(self) -> Iterator[Any]:
        if self.skip == 0 and self.num_shards == 1 and self.recorded is None:
            return iter(self.inner)  # the common case: no Python generator layer per batch
        return self._iter_from_skip()

    def _iter_from_skip(self) -> Iterator[Any]:
        # A generator, so `skip` is consumed at the first batch, not at iter(): torch's multi-process loader calls
        # iter(batch_sampler) twice and only uses the second iterator.
        skip, self.skip, self.padding = self.skip, 0, 0
        for batch in self._my_batches(skip):
            if self.recorded is not None:
                self.recorded.append(batch)
            yield batch

    # -- positions that do not depend on the process count ---------------------------------------------------------
    def inner_batches_before(self, local: int) -> int:
        """Inner batches (of all processes together) that the first ``local`` batches of each process cover."""
        if self.num_shards == 1 or self.split_batches:
            return local
        return local * self.num_shards

    def local_batches_before(self, inner_done: int) -> int:
        """This process's position after ``inner_done`` inner batches: ``len(self)`` minus the batches it still
        gets in that epoch (so that counting down to the epoch's end stays right)."""
        return len(self) - self._share(max(len(self.inner) - inner_done, 0))

    @property
    def plain_batch_size(self) -> int | None:
        """The batch size of every inner batch but an epoch's last: set for torch's own ``BatchSampler`` (the one
        ``prepare`` builds), None for a user's batch sampler (its batches may have any size)."""
        return self.inner.batch_size if type(self.inner) is BatchSampler else None

    def __len__(self) -> int:
        return self._share(len(self.inner))

    def _share(self, inner_batches: int) -> int:
        """This process's batches among ``inner_batches`` consecutive inner batches from an epoch's start."""
        if self.num_shards == 1 or self.split_batches:
            return inner_batches
        if self._drops_last():
            return inner_batches // self.num_shards
        if self.even_batches:
            return math.ceil(inner_batches / self.num_shards)
        return len(range(self.shard, inner_batches, self.num_shards))


class _AlwaysSkip(Sampler[list[int]]):
    def __init__(self, inner: Any, num_batches: int) -> None:
        self.inner, self.num_batches = inner, num_batches

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.inner):
            if i >= self.num_batches:
                yield batch

    def __len__(self) -> int:
        return max(len(self.inner) - self.num_batches, 0)
