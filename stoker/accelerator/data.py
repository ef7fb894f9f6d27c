"""Prepared data loaders: device placement, sharding over processes, and a position that can be saved and restored.

``prepare`` rebuilds a user's ``DataLoader`` around a batch sampler it controls. Shuffling uses a sampler whose
order depends only on (seed, epoch), and the loader's own generator seeds its workers, so iterating never touches
the global RNG — which is what makes mid-epoch resume exact. A restored position skips batches at the sampler
level: skipped samples are never loaded.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

from .operations import send_to_device

if TYPE_CHECKING:
    from .accelerator import Accelerator

_END = object()


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


class ShardedBatchSampler(Sampler[list[int]]):
    """Gives this process its share of each epoch's batches and can start an epoch ``skip`` batches in.

    Several processes: whole batches go round-robin (``split_batches=False``: process p gets batches p, p+n, ...)
    or each batch is cut into n equal slices (``split_batches=True``). With ``even_batches`` the epoch is padded
    with samples from its start so every process gets the same number of full batches; ``padding`` counts the
    repeated samples so ``gather_for_metrics`` can drop them.
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

    def set_epoch(self, epoch: int) -> None:
        for s in (self.inner, getattr(self.inner, "sampler", None)):
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    def _batch_size(self) -> int | None:
        return getattr(self.inner, "batch_size", None)

    def _my_batches(self) -> Iterator[Any]:
        if self.num_shards == 1:
            yield from self.inner
            return
        batches = [list(b) for b in self.inner]
        n, p = self.num_shards, self.shard
        if self.split_batches:
            for b in batches:
                size = math.ceil(len(b) / n)
                if self.even_batches and len(b) < size * n:
                    self.padding += size * n - len(b)
                    b = b + (b * n)[: size * n - len(b)]
                yield b[p * size:(p + 1) * size]
            return
        if self.even_batches and batches:
            full = self._batch_size() or len(batches[0])
            flat = [i for b in batches for i in b]
            if len(batches[-1]) < full:  # complete a short last batch with samples from the epoch's start
                need = full - len(batches[-1])
                batches[-1] = batches[-1] + (flat * (need // len(flat) + 1))[:need]
                self.padding += need
            extra = (-len(batches)) % n
            for k in range(extra):
                start = (k * full) % len(flat)
                batches.append((flat * (full // len(flat) + 2))[start:start + full])
                self.padding += full
        yield from batches[p::n]

    def __iter__(self) -> Iterator[Any]:
        if self.skip == 0 and self.num_shards == 1:
            return iter(self.inner)  # the common case: no Python generator layer per batch
        return self._iter_from_skip()

    def _iter_from_skip(self) -> Iterator[Any]:
        # A generator, so `skip` is consumed at the first batch, not at iter(): torch's multi-process loader calls
        # iter(batch_sampler) twice and only uses the second iterator.
        skip, self.skip, self.padding = self.skip, 0, 0
        yield from itertools.islice(self._my_batches(), skip, None)

    def __len__(self) -> int:
        total = len(self.inner)
        if self.num_shards == 1 or self.split_batches:
            return total
        return math.ceil(total / self.num_shards) if self.even_batches else len(range(self.shard, total, self.num_shards))


class PreparedDataLoader:
    """What ``Accelerator.prepare`` returns for a ``DataLoader``: iterate it exactly like the original.

    Batches arrive on the accelerator's device (tensors at any depth of dicts, lists, tuples, namedtuples and
    dataclasses). ``end_of_dataloader`` is True while the last batch is being processed, which closes an
    accumulation window. ``state_dict()`` / ``load_state_dict()`` describe the position (epoch, batches done, seed).

    Example:
        >>> loader = accelerator.prepare(DataLoader(dataset, batch_size=32, shuffle=True))
        >>> for x, y in loader: ...
    """

    def __init__(self, loader: DataLoader, accelerator: Accelerator, batch_sampler: ShardedBatchSampler | None,
                 seed: int, device: torch.device | None, non_blocking: bool = False) -> None:
        self.base_loader = loader
        self._accelerator = accelerator
        self._batch_sampler = batch_sampler
        self.seed = seed
        self.device = device
        self.non_blocking = non_blocking
        self.epoch = 0
        self.batches_yielded = 0  # in the current epoch, on this process
        self.end_of_dataloader = False
        self.max_batches: int | None = None
        self._cut_short = False
        self._pending_inner_state: dict | None = None
        self._inner_state: dict | None = None

    # -- iteration ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        length = len(self.base_loader)
        return length if self.max_batches is None else min(length, self.max_batches)

    def _longer_than(self, limit: int) -> bool:
        try:
            return len(self.base_loader) > limit
        except TypeError:  # unknown length (an iterable dataset): never padded
            return True

    def limit_batches(self, max_batches: int | None) -> None:
        """Ends every epoch after at most ``max_batches`` batches on this process (None: no limit).

        The last batch kept closes the accumulation window (``end_of_dataloader`` is True on it), ``len()`` and
        saved positions count only the kept batches, and the batches cut off are never loaded.

        Example:
            >>> loader.limit_batches(10)  # a quick run over the first 10 batches of every epoch
        """
        if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int)
                                        or max_batches < 0):
            raise ValueError(f"limit_batches(max_batches={max_batches!r}) must be an int >= 0 or None (no limit).")
        self.max_batches = max_batches

    @property
    def remaining_batches(self) -> int | None:
        """Batches left in this epoch counting the one being processed; None when the length is unknown."""
        try:
            return len(self) - self.batches_yielded + 1
        except TypeError:
            return None

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch (and so the shuffle) of the next iteration."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(skip=0)

    def _iterate(self, skip: int) -> Iterator[Any]:
        skip += self.batches_yielded  # a restored position
        self.batches_yielded = 0
        if self._batch_sampler is not None:
            self._batch_sampler.set_epoch(self.epoch)
            self._batch_sampler.skip = skip
        generator = self.base_loader.generator
        if generator is not None:
            generator.manual_seed(self.seed + self.epoch + 1)  # worker seeds: a function of the epoch alone
        if self._pending_inner_state is not None:
            self.base_loader.load_state_dict(self._pending_inner_state)
            self._pending_inner_state = None
        stack = self._accelerator._loader_stack
        stack.append(self)
        self.end_of_dataloader = False
        device, non_blocking = self.device, self.non_blocking
        limit = self.max_batches
        self._cut_short = False
        finished = False
        track_inner = self._batch_sampler is None and hasattr(self.base_loader, "state_dict")
        try:
            if limit is not None and skip >= limit:
                finished = True
                return
            it = iter(self.base_loader)
            current = next(it, _END)
            if current is _END:
                finished = True
                return
            self.batches_yielded = skip
            while True:
                # one ahead, so the last batch is known while it is processed
                if limit is not None and self.batches_yielded + 1 >= limit:
                    upcoming = _END  # the limit ends the epoch; the next batch is never loaded
                    self._cut_short = self._longer_than(limit)
                else:
                    if track_inner:  # the position *before* the look-ahead is the one a resume needs
                        self._inner_state = self.base_loader.state_dict()
                    upcoming = next(it, _END)
                self.end_of_dataloader = upcoming is _END
                self.batches_yielded += 1
                yield current if device is None else send_to_device(current, device, non_blocking)
                if upcoming is _END:
                    finished = True
                    return
                current = upcoming
        finally:
            if stack and stack[-1] is self:
                stack.pop()
            elif self in stack:
                stack.remove(self)
            # Leaving early (break, an exception) keeps the position, as a saved one would: save_state after
            # the loop records it, and the next iteration continues the same epoch from there.
            if finished:
                self.epoch += 1
                self.batches_yielded = 0
                self._inner_state = None
            elif track_inner and self._inner_state is not None:
                self._pending_inner_state = self._inner_state
            self.end_of_dataloader = False

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Position of this process's loader: resuming continues with the next batch of the same epoch."""
        state: dict[str, Any] = {"epoch": self.epoch, "batches_yielded": self.batches_yielded, "seed": self.seed}
        if hasattr(self.base_loader, "state_dict") and self._batch_sampler is None:
            # an iterable dataset: torchdata keeps its position (as it was before our one-batch look-ahead)
            inner = self._inner_state if self._inner_state is not None else self.base_loader.state_dict()
            state["loader"] = inner
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        done = int(state["batches_yielded"])
        length = None
        try:
            length = len(self)
        except TypeError:
            pass
        if length is not None and done >= length:  # saved on the last batch: next is a fresh epoch
            self.epoch, done = self.epoch + 1, 0
        self.batches_yielded = done
        if "loader" in state:
            self._pending_inner_state = state["loader"]
            self.batches_yielded = 0

    # -- conveniences ---------------------------------------------------------------------------------------------
    @property
    def padding_samples(self) -> int:
        """Samples repeated at the end of this epoch so that processes got even batches."""
        if self._cut_short:  # a limited epoch never reaches the padded batches
            return 0
        if self._batch_sampler is None:  # an iterable dataset sharded over processes counts its own
            from .iterable_shard import IterableShard

            dataset = self.base_loader.dataset
            return dataset.padding if isinstance(dataset, IterableShard) and self.base_loader.num_workers == 0 else 0
        return self._batch_sampler.padding

    @property
    def total_batch_size(self) -> int | None:
        bs = self.batch_size
        if bs is None:
            return None
        sampler = self._batch_sampler
        if sampler is not None and sampler.split_batches:
            return bs
        return bs * self._accelerator.num_processes

    @property
    def batch_size(self) -> int | None:
        sampler = self._batch_sampler
        if sampler is not None:
            size = getattr(sampler.inner, "batch_size", None)
            if size is not None and sampler.split_batches:
                return size // sampler.num_shards
            return size
        return self.base_loader.batch_size

    def skip_first_batches(self, num_batches: int) -> SkipView:
        return SkipView(self, num_batches)

    def __getattr__(self, name: str) -> Any:
        if name == "base_loader":
            raise AttributeError(name)
        return getattr(self.base_loader, name)


class SkipView:
    """``skip_first_batches``' result: iterating it starts the loader ``num_batches`` in (position shared)."""

    def __init__(self, loader: PreparedDataLoader, num_batches: int) -> None:
        self.loader = loader
        self.num_batches = num_batches

    def __iter__(self) -> Iterator[Any]:
        return self.loader._iterate(skip=self.num_batches)

    def __len__(self) -> int:
        return max(len(self.loader) - self.num_batches, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


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


def prepare_data_loader(loader: DataLoader, accelerator: Accelerator, device: torch.device | None) -> PreparedDataLoader:
    """Rebuilds ``loader`` for this process (see the module docstring)."""
    config = accelerator.dataloader_config
    # The shuffle seed comes from the global RNG once, here, so set_seed() before prepare fixes every epoch's order.
    seed = int(torch.empty((), dtype=torch.int64).random_().item()) % 2**62
    n, rank = accelerator.num_processes, accelerator.process_index
    if n > 1:  # every process must shuffle alike even when their global RNGs differ (no set_seed, or seed + rank)
        seed = int(accelerator.strategy.broadcast_object(seed))
    kwargs = _loader_kwargs(loader)
    generator = torch.Generator()
    if isinstance(loader.dataset, IterableDataset):
        return _prepare_iterable(loader, accelerator, device, seed, kwargs, generator)
    sampler = loader.sampler
    if config.use_seedable_sampler and type(sampler) is RandomSampler:
        sampler = SeedableRandomSampler(len(sampler.data_source), seed, sampler._num_samples, sampler.replacement)
    if loader.batch_size is not None and type(loader.batch_sampler) is BatchSampler:
        inner: Any = BatchSampler(sampler, loader.batch_size, loader.drop_last)
    elif loader.batch_sampler is None:  # batch_size=None without a batch_sampler: automatic batching is off
        inner = BatchSampler(sampler, 1, False)  # one index at a time, unwrapped by the collate below
        kwargs["collate_fn"] = _first_only(loader.collate_fn)
    else:
        inner = loader.batch_sampler  # a user's own batch sampler: kept as it is
    if config.split_batches and n > 1 and loader.batch_size is not None and loader.batch_size % n:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True) needs a batch size divisible by the {n} processes; "
            f"got batch_size={loader.batch_size}. Change the batch size or use split_batches=False."
        )
    batch_sampler = ShardedBatchSampler(inner, n, rank, config.even_batches, config.split_batches)
    rebuilt = DataLoader(loader.dataset, batch_sampler=batch_sampler, generator=generator, **kwargs)
    return PreparedDataLoader(rebuilt, accelerator, batch_sampler, seed, device, config.non_blocking)


class _FirstOnly:
    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Any:
        return self.collate(items[0])


def _first_only(collate: Any) -> _FirstOnly:
    return _FirstOnly(collate)


def _prepare_iterable(loader: DataLoader, accelerator: Accelerator, device: torch.device | None, seed: int,
                      kwargs: dict[str, Any], generator: torch.Generator) -> PreparedDataLoader:
    dataset, batch_size = loader.dataset, loader.batch_size
    if accelerator.num_processes > 1:  # every process reads the stream and keeps its share (iterable_shard.py)
        from .iterable_shard import shard_iterable

        dataset, batch_size = shard_iterable(dataset, batch_size, accelerator)
    kwargs.update(batch_size=batch_size, drop_last=loader.drop_last, generator=generator)
    if accelerator.dataloader_config.use_stateful_dataloader:
        from torchdata.stateful_dataloader import StatefulDataLoader

        rebuilt: DataLoader = StatefulDataLoader(dataset, **kwargs)
    else:
        rebuilt = DataLoader(dataset, **kwargs)
    return PreparedDataLoader(rebuilt, accelerator, None, seed, device, accelerator.dataloader_config.non_blocking)


def skip_first_batches(loader: Any, num_batches: int) -> Any:
    """A loader that starts ``num_batches`` in, without loading the skipped samples."""
    if isinstance(loader, (PreparedDataLoader, SkipView)):
        base = loader.loader if isinstance(loader, SkipView) else loader
        return SkipView(base, num_batches)
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset):
        # A user's batch_sampler leaves loader.batch_size None too: only a missing batch_sampler means no batching.
        unbatched = loader.batch_sampler is None
        inner = BatchSampler(loader.sampler, 1, False) if unbatched else loader.batch_sampler
        kwargs = _loader_kwargs(loader)
        if unbatched:
            kwargs["collate_fn"] = _first_only(loader.collate_fn)
        return DataLoader(loader.dataset, batch_sampler=_AlwaysSkip(inner, num_batches), generator=loader.generator,
                          **kwargs)
    raise TypeError(
        f"skip_first_batches needs a DataLoader over a map-style dataset or a prepared loader; got "
        f"{type(loader).__name__}."
    )


class _AlwaysSkip(Sampler[list[int]]):
    def __init__(self, inner: Any, num_batches: int) -> None:
        self.inner, self.num_batches = inner, num_batches

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.inner):
            if i >= self.num_batches:
                yield batch

    def __len__(self) -> int:
        return max(len(self.inner) - self.num_batches, 0)
