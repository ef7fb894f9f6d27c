"""The loader ``prepare`` returns: iteration with one batch of look-ahead, device placement, a resumable position.

Owns: what an epoch is (when it starts, when it ends, what ``break`` keeps), ``end_of_dataloader``, the saved
position (``state_dict``/``load_state_dict``) and ``limit_batches``. Does not own: which indices each process
reads (``samplers.py``), how a user's ``DataLoader`` is rebuilt (``prepare.py``), nor how a position is carried
to another process count (``position.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from ..operations import send_to_device
from ..step.torch_shortcuts import next_batch_function
from .draws import GlobalDraws
from .iterable_shard import IterableShard
from .position import loader_length, plan_resume, portable_position
from .samplers import ShardedBatchSampler

if TYPE_CHECKING:
    from ..config import DataLoaderConfiguration
    from ..distributed.ddp import SingleDevice

_END = object()


class LoaderContext:
    """What prepared loaders need of their Accelerator, handed to them at construction (never the Accelerator).

    Args:
        strategy: The strategy (process index and count; broadcasts the shuffle seed).
        dataloader_config: The ``DataLoaderConfiguration``.
        epoch_started: Called with this context when a loader starts an iteration (``rng_types`` syncing).

    ``stack`` holds the loaders being iterated right now, innermost last (the gradient window and
    ``gather_for_metrics`` read the innermost); a copy (pickling) starts with none.
    """

    def __init__(self, strategy: SingleDevice, dataloader_config: DataLoaderConfiguration,
                 epoch_started: Callable[[LoaderContext], None] | None = None) -> None:
        self.strategy = strategy
        self.dataloader_config = dataloader_config
        self.epoch_started = epoch_started
        self.stack: list[PreparedDataLoader] = []

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stack": []}  # an iteration does not survive a copy


class PreparedDataLoader:
    """What ``Accelerator.prepare`` returns for a ``DataLoader``: iterate it exactly like the original.

    Batches arrive on the accelerator's device (tensors at any depth of dicts, lists, tuples, namedtuples and
    dataclasses). ``end_of_dataloader`` is True while the last batch is being processed, which closes an
    accumulation window. ``state_dict()`` / ``load_state_dict()`` describe the position (epoch, batches done, seed).

    An epoch ends once its last batch has been handed out, however the iterator is driven (a ``for`` loop, or
    ``next()`` called ``len(loader)`` times); leaving before that (``break``, an exception, an iterator dropped
    early) keeps the position, and the next iteration continues the same epoch.

    Example:
        >>> loader = accelerator.prepare(DataLoader(dataset, batch_size=32, shuffle=True))
        >>> for x, y in loader: ...
    """

    def __init__(self, loader: DataLoader, context: LoaderContext, batch_sampler: ShardedBatchSampler | None,
                 seed: int, device: torch.device | None, non_blocking: bool = False,
                 global_draws: GlobalDraws | None = None) -> None:
        self.base_loader = loader
        self._draws = global_draws if global_draws is not None else GlobalDraws()
        self._context = context
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
        self._last_handed_out = False  # this epoch's last batch is out: the epoch ends with its iterator
        self._owner: object | None = None  # the iteration the position belongs to (an older one is stale)
        # Where counting in this epoch started: (inner batches or stream items of all processes, batches of this
        # process); ``rebased`` when a restored global count set it (another process count; see position.py).
        self.epoch_start = (0, 0)
        self.rebased = False
        self._restored_items: int | None = None  # stream items to drop at the next iteration (a restore)

    # -- iteration ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        length = len(self.base_loader)
        return length if self.max_batches is None else min(length, self.max_batches)

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
        length = loader_length(self)
        return None if length is None else length - self.batches_yielded + 1

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch (and so the shuffle) of the next iteration."""
        self._end_handed_out_epoch()
        self.epoch = epoch

    def _end_handed_out_epoch(self) -> None:
        """Ends the epoch now if its last batch was handed out by an iterator that is still open."""
        if self._last_handed_out:
            self._owner = None  # that iterator is stale from here on: its clean-up changes nothing
            self._next_epoch()

    def start_next_epoch(self) -> None:
        """Ends the epoch in progress (left by a ``break``, or a restored position), so that the next iteration
        starts the next epoch instead of continuing it: for a reader that wants a whole pass each time, such as a
        combined loader stopped by its shortest member. An epoch not begun stays as it is."""
        if self.batches_yielded or self.rebased or self._restored_items or self._pending_inner_state is not None:
            self._owner = None  # an iteration still open is stale from here on: its clean-up changes nothing
            self._pending_inner_state = self._restored_items = None
            self._next_epoch()

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.batches_yielded = 0
        self._inner_state = None
        self._last_handed_out = False
        self.epoch_start, self.rebased = (0, 0), False
        dataset = self.base_loader.dataset
        if isinstance(dataset, IterableShard):
            dataset.skip_items = 0

    def __iter__(self) -> Iterator[Any]:
        return self.iterate(skip=0)

    def iterate(self, skip: int) -> Iterator[Any]:
        """An iteration that starts ``skip`` batches into the epoch (after a restored position)."""
        # (A generator: this body starts at the first next(), so an iterator made but never used changes nothing.)
        self._end_handed_out_epoch()  # e.g. next() called len(loader) times on an iterator that is still open
        owner = self._owner = object()
        skip, discard = self._start_epoch(skip)
        stack = self._context.stack
        stack.append(self)
        self.end_of_dataloader = False
        self._cut_short = False
        finished = [False]  # set when the epoch ran to its end (or to its limit)
        try:
            yield from self._look_ahead(skip, finished, discard)
        finally:
            self._leave(stack, owner, finished[0])

    def _start_epoch(self, skip: int) -> tuple[int, int]:
        """Positions the sampler, seeds the workers and draws what the user's loader would; returns the batches to
        skip (``skip`` plus a restored position) and the batches to read and drop first (see :meth:`_position`)."""
        items, self._restored_items = self._restored_items, None
        discard = self._position(skip, items)
        skip += self.batches_yielded  # a restored position
        self.batches_yielded = 0
        generator = self.base_loader.generator
        if generator is not None:
            generator.manual_seed(self.seed + self.epoch + 1)  # worker seeds: a function of the epoch alone
        # a restored or unfinished epoch (a position of another process count may be 0 batches of this process)
        continued = skip > 0 or self._pending_inner_state is not None or self.rebased
        if self._pending_inner_state is not None:
            self.base_loader.load_state_dict(self._pending_inner_state)
            self._pending_inner_state = None
        context = self._context
        if context.epoch_started is not None:
            context.epoch_started(context)  # Accelerator(rng_types=["torch", ...])
        if not continued:  # an epoch starts: the user's loader would draw now (a continued one draws nothing)
            self._draws.epoch_started()
        return skip, discard

    def _position(self, skip: int, items: int | None) -> int:
        """Sets where the epoch starts in the sampler (in inner batches of all processes: ``skip`` and the batches
        done, counted from ``epoch_start``) or in a sharded stream (``items`` restored); returns the batches of a
        stream to read and drop: ``skip`` and the batches done that neither torchdata's restored state nor the
        items a sharded stream skips already cover (a stream restarts at every iteration)."""
        sampler = self._batch_sampler
        if sampler is not None:
            sampler.set_epoch(self.epoch, self.seed)  # the seed too: load_state_dict may have changed it
            base, first = self.epoch_start
            sampler.skip = base + sampler.inner_batches_before(skip + self.batches_yielded - first)
            return 0
        if self._pending_inner_state is not None:  # torchdata continues from the batches done
            return skip
        dataset = self.base_loader.dataset
        if isinstance(dataset, IterableShard):
            if items is not None:
                dataset.skip_items = items
            # the items it skips (restored in this epoch) cover the first epoch_start[1] batches of this process
            return skip + self.batches_yielded - (self.epoch_start[1] if dataset.skip_items else 0)
        return skip + self.batches_yielded

    def _look_ahead(self, skip: int, finished: list[bool], discard: int = 0) -> Iterator[Any]:
        """The batches, one fetched ahead so that the last one is known while it is processed."""
        limit = self.max_batches
        if limit is not None and skip >= limit:
            finished[0] = True
            return
        it, fetch = next_batch_function(self.base_loader)  # noqa: F841 - `it` keeps the iterator alive
        try:
            for _ in range(discard):  # consumed before a position restored from another process count
                fetch()
            current = fetch()
        except StopIteration:
            finished[0] = True
            return
        self.batches_yielded = skip
        device, non_blocking, track_inner = self.device, self.non_blocking, self._tracks_inner
        while True:
            if limit is not None and self.batches_yielded + 1 >= limit:
                upcoming = _END  # the limit ends the epoch; the next batch is never loaded
                length = loader_length(self.base_loader)  # None (an iterable dataset): never padded
                self._cut_short = length is None or length > limit
            else:
                if track_inner:  # the position *before* the look-ahead is the one a resume needs
                    self._inner_state = self.base_loader.state_dict()
                try:
                    upcoming = fetch()
                except StopIteration:
                    upcoming = _END
            self.end_of_dataloader = upcoming is _END
            self._last_handed_out = self.end_of_dataloader
            self.batches_yielded += 1
            yield current if device is None else send_to_device(current, device, non_blocking)
            if upcoming is _END:
                finished[0] = True
                return
            current = upcoming

    @property
    def _tracks_inner(self) -> bool:
        """An iterable dataset under torchdata: the inner loader keeps the position (``state_dict``)."""
        return self._batch_sampler is None and hasattr(self.base_loader, "state_dict")

    def _leave(self, stack: list[PreparedDataLoader], owner: object, finished: bool) -> None:
        """The iteration ends: off the stack; a finished epoch moves on, an unfinished one keeps its position."""
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:
            stack.remove(self)
        if self._owner is owner:  # not superseded by a newer iteration or a load_state_dict
            self._owner = None
            # Leaving before the last batch (break, an exception) keeps the position, as a saved one would:
            # save_state after the loop records it, and the next iteration continues the same epoch.
            if finished or self._last_handed_out:
                self._next_epoch()
            elif self._tracks_inner and self._inner_state is not None:
                self._pending_inner_state = self._inner_state
            self.end_of_dataloader = False

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Position of this process's loader: resuming continues with the next batch of the same epoch."""
        state: dict[str, Any] = {"epoch": self.epoch, "batches_yielded": self.batches_yielded, "seed": self.seed}
        # torchdata's position as it was before our one-batch look-ahead; none at an epoch's start, where the inner
        # loader still holds the ended epoch's (its fast-forward would draw seeds, or skip a limited epoch's rest)
        if self._tracks_inner and self._inner_state is not None:
            state["loader"] = self._inner_state
        return state

    def checkpoint_state_dict(self) -> dict[str, Any]:
        """:meth:`state_dict` and, under ``"position"``, the position in a form that holds on any process count
        (what ``save_state`` stores; see ``position.py``)."""
        return {**self.state_dict(), "position": portable_position(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position from :meth:`state_dict` or :meth:`checkpoint_state_dict` (then also one saved by
        another process count); an iterator still open becomes stale.

        Raises:
            ValueError: ``state`` is malformed (the message names the key), or (``ProcessCountError``) it was saved
                by another process count at a point that cannot be continued exactly here.
        """
        resume = plan_resume(self, state)  # checks everything before anything changes
        self._draws.restored()
        self._owner = None
        self._last_handed_out = False
        self.seed, self.epoch, self.batches_yielded = resume.seed, resume.epoch, resume.batches
        # torchdata's own position (same process count), also what a save before the next iteration records
        self._pending_inner_state = None if resume.inner_state is None else dict(resume.inner_state)
        self._inner_state = self._pending_inner_state
        self.epoch_start, self.rebased, self._restored_items = resume.start, resume.rebased, resume.items

    # -- what position.py reads -------------------------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        return self._context.strategy.num_processes

    @property
    def last_batch_out(self) -> bool:
        """This epoch's last batch was handed out (the epoch ends with the iteration; a length may be unknown)."""
        return self._last_handed_out

    @property
    def sharded_sampler(self) -> ShardedBatchSampler | None:
        """The batch sampler that shares each epoch between processes (None for an iterable dataset)."""
        return self._batch_sampler

    @property
    def shards_stream(self) -> bool:
        """An iterable dataset read by several processes (each keeps its share of the stream)."""
        return self._batch_sampler is None and isinstance(self.base_loader.dataset, IterableShard)

    @property
    def items_per_batch(self) -> int:
        """Stream items that one batch of every process takes together (an iterable dataset)."""
        return (self.base_loader.batch_size or 1) * self._context.strategy.num_processes

    # -- conveniences ---------------------------------------------------------------------------------------------
    @property
    def padding_samples(self) -> int:
        """Samples repeated at the end of this epoch so that processes got even batches."""
        if self._cut_short:  # a limited epoch never reaches the padded batches
            return 0
        if self._batch_sampler is None:  # an iterable dataset sharded over processes counts its own
            dataset = self.base_loader.dataset
            return dataset.padding if isinstance(dataset, IterableShard) and self.base_loader.num_workers == 0 else 0
        return self._batch_sampler.padding

    @property
    def final_step_samples(self) -> int | None:
        """Dataset samples in the epoch's last step, all processes together (0: that step is full); None where
        batches have no fixed size (a user's batch sampler, a sampler of batches, a stream), with ``drop_last``, or
        when the epoch was cut short. Metrics gathered at that step keep this many rows, whatever a row holds."""
        sampler = self._batch_sampler
        if self._cut_short or sampler is None or sampler.plain_batch_size is None or sampler.inner.drop_last:
            return None
        if isinstance(sampler.inner.sampler, BatchSampler):  # ``sampler=`` a batch sampler: its batches are items
            return None
        return len(sampler.inner.sampler) % (self.total_batch_size or 1)

    @property
    def remainder(self) -> int:
        """Accelerate's name for :attr:`final_step_samples`, with -1 where that is None (its value there)."""
        samples = self.final_step_samples
        return -1 if samples is None else samples

    @property
    def total_batch_size(self) -> int | None:
        sampler = self._batch_sampler
        if sampler is not None and sampler.split_batches:  # each batch is cut between the processes
            return getattr(sampler.inner, "batch_size", None)
        bs = self.batch_size
        return None if bs is None else bs * self.num_processes

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
        return self.loader.iterate(skip=self.num_batches)

    def __len__(self) -> int:
        return max(len(self.loader) - self.num_batches, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
