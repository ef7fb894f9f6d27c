"""Prepared data loaders: ``prepare`` rebuilds a user's ``DataLoader`` for this process.

``prepare`` rebuilds a user's ``DataLoader`` around a batch sampler it controls. Shuffling uses a sampler whose
order depends only on (seed, epoch), and the loader's own generator seeds its workers, so a restored position
replays the same order — which is what makes mid-epoch resume exact. The global RNG still moves as the user's own
loader would move it (``GlobalDraws``): dropout sees the numbers of a plain loop. A restored position skips batches
at the sampler level: skipped samples are never loaded.

This module owns the rebuild (which sampler, which loader arguments); the samplers live in ``samplers.py``,
the loader it returns in ``loader.py``, the sharding of iterable datasets in ``iterable_shard.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from .loader import GlobalDraws, LoaderContext, PreparedDataLoader, SkipView
from .samplers import SeedableRandomSampler, ShardedBatchSampler, _AlwaysSkip, seedable, split_batch_size


def _loader_kwargs(loader: DataLoader) -> dict[str, Any]:
    kwargs = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                  timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                  multiprocessing_context=loader.multiprocessing_context,
                  persistent_workers=loader.persistent_workers)
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    return kwargs


def prepare_data_loader(loader: DataLoader, context: LoaderContext, device: torch.device | None,
                        draw_seed: bool = True, even_batches: bool | None = None) -> PreparedDataLoader:
    """Rebuilds ``loader`` for this process (see the module docstring). ``context``: the Accelerator's
    :class:`LoaderContext`. ``draw_seed=False``: without a configured ``data_seed`` the loader's seed is 0 instead of
    one drawn from the global RNG, so that preparing it moves no random state (a loader whose position no checkpoint
    holds, prepared in the middle of a run: a resumed run prepares it at another point of the random stream).
    ``even_batches``: this loader's own choice over the configuration's (False: no sample is repeated to give every
    process as many batches; for a loader read without collectives per batch, such as prediction's)."""
    config = context.dataloader_config
    even = config.even_batches if even_batches is None else even_batches
    n, rank = context.strategy.num_processes, context.strategy.process_index
    seed = config.data_seed
    iterable = isinstance(loader.dataset, IterableDataset)
    shuffled = None if iterable or not config.use_seedable_sampler else _random_sampler(loader)
    # What iterating the user's loader drew from the global RNG each epoch: the base seed (unless it has a
    # generator), its RandomSampler's seed (unless that has one); the prepared loader draws the same (GlobalDraws).
    draws = GlobalDraws(base=loader.generator is None, sampler=shuffled is not None and shuffled.generator is None,
                        persistent=loader.persistent_workers and loader.num_workers > 0)
    if seed is None and draw_seed and (shuffled is not None or loader.num_workers > 0 or
                                       (n > 1 and not _fixed_order(loader))):
        # The shuffle (and worker) seed comes from the global RNG once, here, so set_seed() before prepare fixes
        # every order; it counts as the first epoch's first draw. A loader that nothing random reads the seed of
        # (no shuffle, no workers, one process or torch's sequential order) draws nothing here: its epochs draw what
        # the user's loader did, and a loader prepared after it draws its seed as on one process (the same order).
        seed = int(torch.empty((), dtype=torch.int64).random_().item()) % 2**62
        draws.prepaid = 1
        if n > 1:  # every process must shuffle alike even when their global RNGs differ (no set_seed, seed + rank)
            seed = int(context.strategy.broadcast_object(seed))
    elif seed is None:
        seed = 0
    kwargs = _loader_kwargs(loader)
    kwargs["pin_memory"], non_blocking = transfer_settings(device, config.non_blocking, loader.pin_memory,
                                                           loader.num_workers)
    generator = torch.Generator()
    if iterable:
        return _prepare_iterable(loader, context, device, seed, kwargs, generator, non_blocking, draws, even)
    sampler = seedable(loader.sampler, seed) if config.use_seedable_sampler else loader.sampler
    if loader.batch_size is not None and type(loader.batch_sampler) is BatchSampler:
        inner: Any = BatchSampler(sampler, loader.batch_size, loader.drop_last)
    elif loader.batch_sampler is None:  # batch_size=None without a batch_sampler: automatic batching is off
        inner = BatchSampler(sampler, 1, False)  # one index at a time, unwrapped by the collate below
        kwargs["collate_fn"] = _FirstOnly(loader.collate_fn)
    else:
        # a user's own batch sampler: kept, but a RandomSampler inside it shuffles with the loader's seed
        inner = seedable(loader.batch_sampler, seed) if config.use_seedable_sampler else loader.batch_sampler
    if config.split_batches:
        split_batch_size(loader.batch_size, n)
    batch_sampler = ShardedBatchSampler(inner, n, rank, even, config.split_batches)
    rebuilt = DataLoader(loader.dataset, batch_sampler=batch_sampler, generator=generator, **kwargs)
    return PreparedDataLoader(rebuilt, context, batch_sampler, seed, device, non_blocking, draws)


def _fixed_order(loader: DataLoader) -> bool:
    """Whether ``loader`` reads its map-style dataset in torch's sequential order (its ``SequentialSampler``, in
    torch's ``BatchSampler`` or none): an order no seed changes. A sampler of the user's own may draw from the
    global RNG, which several processes seed from the loader's seed (``ShardedBatchSampler``)."""
    if isinstance(loader.dataset, IterableDataset):
        return False
    batch_sampler = loader.batch_sampler
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        return False
    return type(loader.sampler if batch_sampler is None else batch_sampler.sampler) is SequentialSampler


def _random_sampler(loader: DataLoader) -> RandomSampler | None:
    """The plain ``RandomSampler`` that :func:`seedable` replaces in ``loader`` (its sampler, or the one inside
    the user's ``BatchSampler``), or None."""
    if loader.batch_sampler is None or loader.batch_size is not None and type(loader.batch_sampler) is BatchSampler:
        sampler = loader.sampler
    else:
        sampler = getattr(loader.batch_sampler, "sampler", None) if isinstance(loader.batch_sampler, BatchSampler) \
            else None
    return sampler if type(sampler) is RandomSampler else None


def transfer_settings(device: torch.device | None, non_blocking: bool | None,
                      pin_memory: bool, num_workers: int = 0) -> tuple[bool, bool]:
    """``(pin_memory, non_blocking)`` of a prepared loader that places its batches on ``device``.

    On CUDA an asynchronous copy is safe (later kernels on the stream wait for it), so ``non_blocking=None`` means
    on there. Pinned memory lets that copy overlap with compute, and the loader pins for you when it has worker
    processes: it pins on its own thread then, and workers always hand over host tensors. Without workers it does
    not: pinning would run on the training thread anyway, and a dataset that already holds CUDA tensors (common
    for small data) cannot be pinned at all (torch raises "cannot pin 'torch.cuda.FloatTensor'"); an asynchronous
    copy from unpinned host memory is still correct. Elsewhere nothing changes unless asked: the loader's own
    ``pin_memory``, and ``non_blocking`` only when it is True.

    Example:
        >>> transfer_settings(torch.device("cuda", 0), None, pin_memory=False, num_workers=2)
        (True, True)
        >>> transfer_settings(torch.device("cuda", 0), None, pin_memory=False, num_workers=0)
        (False, True)
    """
    if device is None:  # no placement: batches stay where the loader made them
        return pin_memory, False
    if device.type == "cuda":
        copy_async = True if non_blocking is None else non_blocking
        return pin_memory or (copy_async and num_workers > 0), copy_async
    return pin_memory, bool(non_blocking)


class _FirstOnly:
    """The user's collate of one index at a time (batching off): a class, not a closure, so a loader pickles."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Any:
        return self.collate(items[0])


def _prepare_iterable(loader: DataLoader, context: LoaderContext, device: torch.device | None, seed: int,
                      kwargs: dict[str, Any], generator: torch.Generator, non_blocking: bool,
                      draws: GlobalDraws, even: bool) -> PreparedDataLoader:
    dataset, batch_size = loader.dataset, loader.batch_size
    if context.strategy.num_processes > 1:  # every process reads the stream and keeps its share (iterable_shard.py)
        from .iterable_shard import shard_iterable

        dataset, batch_size = shard_iterable(dataset, batch_size, context, loader.drop_last, even)
    kwargs.update(batch_size=batch_size, drop_last=loader.drop_last, generator=generator)
    if context.dataloader_config.use_stateful_dataloader:
        from torchdata.stateful_dataloader import StatefulDataLoader

        rebuilt: DataLoader = StatefulDataLoader(dataset, **kwargs)
    else:
        rebuilt = DataLoader(dataset, **kwargs)
    return PreparedDataLoader(rebuilt, context, None, seed, device, non_blocking, draws)


def skip_first_batches(loader: Any, num_batches: int) -> Any:
    """A loader that starts ``num_batches`` in, without loading the skipped samples."""
    if isinstance(loader, (PreparedDataLoader, SkipView)):  # a SkipView passes the call on to its loader
        return loader.skip_first_batches(num_batches)
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset):
        # A user's batch_sampler leaves loader.batch_size None too: only a missing batch_sampler means no batching.
        unbatched = loader.batch_sampler is None
        inner = BatchSampler(loader.sampler, 1, False) if unbatched else loader.batch_sampler
        kwargs = _loader_kwargs(loader)
        if unbatched:
            kwargs["collate_fn"] = _FirstOnly(loader.collate_fn)
        return DataLoader(loader.dataset, batch_sampler=_AlwaysSkip(inner, num_batches), generator=loader.generator,
                          **kwargs)
    raise TypeError(
        f"skip_first_batches needs a DataLoader over a map-style dataset or a prepared loader; got "
        f"{type(loader).__name__}."
    )


__all__ = [
    "PreparedDataLoader", "SeedableRandomSampler", "ShardedBatchSampler", "SkipView", "prepare_data_loader",
    "skip_first_batches", "transfer_settings",
]
