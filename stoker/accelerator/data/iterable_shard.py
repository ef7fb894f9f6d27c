"""Sharding an ``IterableDataset`` over processes (what ``prepare`` wraps such a loader's dataset in).

Every process reads the whole stream, in the same order, and keeps its share of each *group* of
``per_process * num_processes`` consecutive items: process p keeps items ``[p * per_process, (p + 1) * per_process)``
of every group, so each batch of the rebuilt loader is process p's part of one global batch (whole batches
round-robin; with ``split_batches`` a slice of every batch). With ``even_batches`` a short last group is
completed with the stream's first items, so that every process gets as many batches; ``padding`` counts them for
``gather_for_metrics`` (visible in the main process when the loader has no workers). ``even_split`` shares that
last group as Accelerate's batch dispatcher does (``dispatch_batches=True``): in equal parts of
``ceil(rest / num_processes)`` items, so a rest that divides needs no padding. With ``drop_last`` a short last
group is dropped whole (every process's batch is a full one, none repeated: the rule of a map-style loader's last
round, ``samplers.ShardedBatchSampler``). ``skip_items`` starts the
epoch after that many stream items (a position restored from a run with another process count): they are read and
dropped, and the groups start after them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from .samplers import split_batch_size


class IterableShard(IterableDataset):
    """This process's share of ``dataset`` (see the module docstring).

    Example:
        >>> shard = IterableShard(stream, per_process=4, num_processes=2, process_index=1)
        >>> # items 4-7, 12-15, ... of the stream
    """

    def __init__(self, dataset: Any, per_process: int, num_processes: int, process_index: int,
                 even_batches: bool = True, even_split: bool = False, drop_last: bool = False) -> None:
        if per_process < 1:
            raise ValueError(f"IterableShard(per_process={per_process!r}) must be >= 1.")
        self.dataset = dataset
        self.per_process = per_process
        self.num_processes = num_processes
        self.process_index = process_index
        self.even_batches = even_batches
        self.even_split = even_split and not drop_last  # an even split makes short batches: drop_last drops them
        self.drop_last = drop_last
        self.padding = 0
        self.skip_items = 0  # stream items already consumed (by all processes) in this epoch: a restored position

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        per, group = self.per_process, self.per_process * self.num_processes
        start = self.process_index * per
        self.padding = 0
        first: list[Any] = []  # the stream's first group, to complete a short last one
        buffer: list[Any] = []
        skip = self.skip_items  # read again by every iteration of the epoch (torchdata's fast-forward too)
        for index, item in enumerate(self.dataset):
            if len(first) < group:
                first.append(item)
            if index < skip:  # consumed before a restored position (possibly on another process count)
                continue
            buffer.append(item)
            if len(buffer) == group:
                yield from buffer[start:start + per]
                buffer = []
        if self.drop_last:  # a short last group holds too few items for a full batch on every process
            buffer = []
        if buffer:
            if self.even_batches:
                if self.even_split:
                    per = -(-len(buffer) // self.num_processes)
                    start = self.process_index * per
                need = per * self.num_processes - len(buffer)
                buffer += (first * (need // len(first) + 1))[:need]
                self.padding = need
            yield from buffer[start:start + per]

    def __len__(self) -> int:
        total = len(self.dataset)  # TypeError for a stream without a length, as DataLoader expects
        per, group = self.per_process, self.per_process * self.num_processes
        full, rest = divmod(total, group)
        if self.drop_last:
            rest = 0
        if self.even_batches:
            last = -(-rest // self.num_processes) if self.even_split else per if rest else 0
            return full * per + last
        return full * per + min(per, max(rest - self.process_index * per, 0))

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


def shard_iterable(dataset: Any, batch_size: int | None, context: Any,
                   drop_last: bool = False, even_batches: bool | None = None) -> tuple[IterableShard, int | None]:
    """This process's :class:`IterableShard` of ``dataset`` and the batch size its loader uses (``context``: the
    loaders' ``LoaderContext``: ``dataloader_config``, ``strategy``; ``drop_last``: the user's loader's;
    ``even_batches``: the loader's own choice over the configuration's)."""
    config, n = context.dataloader_config, context.strategy.num_processes
    even = config.even_batches if even_batches is None else even_batches
    if config.split_batches:
        batch_size = split_batch_size(batch_size, n)
    shard = IterableShard(dataset, batch_size or 1, n, context.strategy.process_index, even,
                          even_split=config.dispatch_batches is True, drop_last=drop_last)
    return shard, batch_size
