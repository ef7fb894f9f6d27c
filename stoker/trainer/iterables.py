"""Loaders that are not a ``DataLoader``: a :class:`CombinedLoader` of several, or any iterable of batches.

Owns how the Trainer reads them. A ``DataLoader`` is rebuilt by the Accelerator (sharded, seeded, resumable); an
iterable of another kind cannot be rebuilt, so :class:`IterableLoader` reads it as it is: batches are moved to the
device, ``limit_*_batches`` applies, the last batch is known one batch ahead (it closes an epoch), but each process
reads the whole iterable. The ``DataLoader``\\ s inside a ``CombinedLoader`` are prepared as usual, so only the
combining is plain. A run resumed mid-epoch reads the epoch again from its start and drops the batches done
(:meth:`IterableLoader.resume`): exact for a ``CombinedLoader`` of ``DataLoader``\\ s, whose positions at the epoch's
start the checkpoint keeps with their global batch sizes and pass lengths (on another process count it continues
after the samples taken where whole steps hold them, and warns where they do not); another iterable must give the
same batches again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

if TYPE_CHECKING:
    from ..accelerator import Accelerator

__all__ = ["CombinedLoader", "IterableLoader", "MODES", "batch_count", "check_iterable", "prepare_loader",
           "replace_loader"]

MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def _length(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return None


def _of_numbers(tree: Any) -> bool:
    """A dict / list / tuple of plain values (``[0, 1, 2]``): one iterable of batches, not several iterables."""
    values = list(tree.values()) if isinstance(tree, Mapping) else tree
    return bool(values) and all(isinstance(value, (int, float, str)) for value in values)


def _leaves(tree: Any) -> list[Any]:
    """The iterables of a (nested) dict / list / tuple of them, in order."""
    if isinstance(tree, (Mapping, list, tuple)) and _of_numbers(tree):
        return [tree]
    if isinstance(tree, Mapping):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    if isinstance(tree, (list, tuple)):
        return [leaf for value in tree for leaf in _leaves(value)]
    return [tree]


def _rebuild(tree: Any, leaves: Iterator[Any]) -> Any:
    """``tree`` with its leaves replaced, in order, by ``leaves``."""
    if isinstance(tree, (Mapping, list, tuple)) and _of_numbers(tree):
        return next(leaves)
    if isinstance(tree, Mapping):
        return {key: _rebuild(value, leaves) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rebuild(value, leaves) for value in tree) if isinstance(tree, list) else \
            tuple(_rebuild(value, leaves) for value in tree)
    return next(leaves)


class CombinedLoader:
    """Several iterables read together; a batch has their structure (a dict of loaders gives a dict of batches).

    Modes: ``"min_size"`` stops with the shortest; ``"max_size_cycle"`` runs as long as the longest and restarts
    the shorter ones (what ``fit`` does with a list or dict of train loaders); ``"max_size"`` runs as long as the
    longest and gives None for the exhausted ones; ``"sequential"`` reads them one after the other (evaluation
    only: each is one of the stage's loaders). Iterating it yields ``(batch, batch_idx, dataloader_idx)``.

    Example:
        >>> combined = CombinedLoader({"a": range(3), "b": range(2)}, "max_size_cycle")
        >>> [batch for batch, _, _ in combined]
        [{'a': 0, 'b': 0}, {'a': 1, 'b': 1}, {'a': 2, 'b': 0}]
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}) is not a mode. Expected one of: {', '.join(MODES)}.")
        self.iterables = iterables
        self.mode = mode
        # one batch limit per iterable (None: all of its batches), the Trainer's limit_*_batches (see batches())
        self.limits: list[int | None] | None = None

    @property
    def flattened(self) -> list[Any]:
        """The iterables, in order (a nested dict / list flattened)."""
        return _leaves(self.iterables)

    def map(self, fn: Callable[[Any], Any]) -> CombinedLoader:
        """The same combination over ``fn`` of each iterable (the Trainer prepares the DataLoaders so)."""
        return CombinedLoader(_rebuild(self.iterables, iter([fn(leaf) for leaf in self.flattened])), self.mode)

    def iterable_batches(self) -> list[int | float]:
        """Each iterable's batches per pass after its limit (:attr:`limits`); inf: no length and no limit."""
        limits = self.limits or [None] * len(self.flattened)
        counts: list[int | float] = []
        for leaf, limit in zip(self.flattened, limits):
            n = _length(leaf)
            counts.append(math.inf if n is None and limit is None else min(m for m in (n, limit) if m is not None))
        return counts

    def __len__(self) -> int:
        sizes = self.iterable_batches()
        if any(math.isinf(n) for n in sizes):
            raise TypeError("CombinedLoader has no length: one of its iterables has none.")
        if self.mode == "sequential":
            return sum(sizes)
        return int(min(sizes) if self.mode == "min_size" else max(sizes))

    def batches(self) -> Iterator[Any]:
        """The batches alone (what a step gets), in this mode; ``"sequential"``: each iterable's in turn."""
        leaves, limits = self.flattened, self.limits or [None] * len(self.flattened)
        passes = (iter(leaf) if n is None else itertools.islice(leaf, n) for leaf, n in zip(leaves, limits))
        if self.mode == "sequential":  # each pass begins when the one before it ends
            yield from itertools.chain.from_iterable(passes)
        elif self.mode == "min_size":
            for batches in zip(*passes):
                yield _rebuild(self.iterables, iter(batches))
        else:  # max_size modes: the limits set the length only (Lightning's rule), so a shorter iterable ends
            n = max(self.iterable_batches(), default=math.inf)  # (or restarts) where its data ends, not at its limit
            yield from self._max_size(leaves) if math.isinf(n) else itertools.islice(self._max_size(leaves), int(n))

    def _max_size(self, leaves: list[Any]) -> Iterator[Any]:
        """The ``max_size`` / ``max_size_cycle`` batches of ``leaves`` until the longest ends."""
        iterators = [iter(leaf) for leaf in leaves]
        done = [False] * len(leaves)
        while True:
            batches = []
            for i in range(len(leaves)):
                batch = next(iterators[i], _END)
                if batch is _END:
                    done[i] = True
                    if self.mode == "max_size_cycle" and not all(done):
                        iterators[i] = iter(leaves[i])  # the shorter ones start again until the longest ends
                        batch = next(iterators[i], None)
                    else:
                        batch = None
                batches.append(batch)
            if all(done):
                return
            yield _rebuild(self.iterables, iter(batches))

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        if self.mode != "sequential":
            for batch_idx, batch in enumerate(self.batches()):
                yield batch, batch_idx, 0
            return
        for dataloader_idx, leaf in enumerate(self.flattened):
            for batch_idx, batch in enumerate(leaf):
                yield batch, batch_idx, dataloader_idx


_END = object()


def _shape(leaf: Any) -> list[int | None]:
    """``[samples of all processes per batch, batches per pass of this process]`` of a prepared loader (None:
    unknown, e.g. a user's batch sampler, or a stream without ``__len__``)."""
    return [getattr(leaf, "total_batch_size", None), _length(leaf)]


def _replayed(batches: int, saved: list[list[int | None]] | None, prepared: list[Any],
              start: list[dict[str, Any]]) -> tuple[int, str | None]:
    """The steps of this run that cover the saving run's ``batches`` (``saved``: its loaders' :func:`_shape`\\ s;
    None from a checkpoint that did not record them), and None when that is exact, else why not."""
    now = [_shape(leaf) for leaf in prepared]
    if saved is None:  # only the start positions tell the saving run's process count
        then = {(state.get("position") or {}).get("num_processes") for state in start} - {None}
        same = then <= {getattr(leaf, "num_processes", None) for leaf in prepared}
        return batches, None if same else "the checkpoint was saved by another process count and does not record " \
            "its loaders' batch sizes"
    saved = [list(shape) for shape in saved]
    if [shape[0] for shape in saved] == [shape[0] for shape in now]:  # the same steps hold the same samples
        return batches, None
    if any(shape[0] is None for shape in saved + now):
        return batches, (f"each loader's [samples of all processes per step, steps per pass] were {saved} when it "
                         f"was saved and are {now} now")
    # Exact when every loader's samples per step change by one ratio that maps the steps done to whole steps, and
    # each loader's pass holds as many samples as before (so the shorter ones start again at the same samples).
    done = {(then[0] * batches // here[0], then[0] * batches % here[0]) for then, here in zip(saved, now)}
    aligned = all(None not in (then[1], here[1]) and then[0] * then[1] == here[0] * here[1]
                  for then, here in zip(saved, now))
    if aligned and len(done) == 1 and next(iter(done))[1] == 0:
        return next(iter(done))[0], None
    first = batches * saved[0][0] // now[0][0]  # about as many samples of the first loader as were taken
    return first, (f"each loader's [samples of all processes per step, steps per pass] were {saved} when it was "
                   f"saved and are {now} now, so no count of this run's steps covers the same samples of every "
                   f"loader and starts the shorter ones again at the same points; it continues after {first} steps "
                   f"(about the samples of the first loader that {batches} steps took then)")


class IterableLoader:
    """An iterable of batches read as the Trainer reads a prepared loader (see the module docstring).

    While it is iterated it is the Accelerator's current loader (``accelerator.loader_context.stack``), as a
    prepared loader is: its last batch closes the gradient-accumulation window, and a window cut short by the end
    is averaged over its true length when the length is known.

    Args:
        source: The iterable (a ``CombinedLoader`` gives its batches, not its ``(batch, idx, idx)`` triples).
        accelerator: Whose device the batches go to (tensors at any depth of dicts, lists and tuples).
    """

    def __init__(self, source: Iterable[Any], accelerator: Accelerator) -> None:
        self.source = source
        self.device = accelerator.device
        self.max_batches: int | None = None
        self.end_of_dataloader = False
        self.batches_yielded = 0
        self._current = accelerator.loader_context.stack  # the loaders being iterated, innermost last
        self._skip = 0  # batches of the epoch to read again and drop at the next iteration (a resume: resume())
        self._start: list[dict[str, Any]] | None = None  # the prepared loaders' positions when the epoch started

    @property
    def remaining_batches(self) -> int | None:
        """Batches left in this epoch counting the one being processed; None when the length is unknown."""
        n = _length(self)
        return None if n is None else n - self.batches_yielded + 1

    def __len__(self) -> int:
        n = _length(self.source)
        if n is None:
            raise TypeError(f"{type(self.source).__name__} has no length.")
        return n if self.max_batches is None else min(n, self.max_batches)

    def limit_batches(self, max_batches: int | None) -> None:
        self.max_batches = max_batches
        if isinstance(self.source, CombinedLoader):  # the prepared loaders inside end their epochs where they are
            limits = self.source.limits or [None] * len(self.source.flattened)  # left, so that the next pass
            if self.source.mode.startswith("max_size"):  # starts them at their beginning; there the limits
                limits = [None] * len(limits)  # cut the combination only (CombinedLoader.batches)
            for leaf, own in zip(self.source.flattened, limits):
                if callable(getattr(leaf, "limit_batches", None)):
                    leaf.limit_batches(min((n for n in (max_batches, own) if n is not None), default=None))

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the iterable (or its sampler) when it takes one."""
        for owner in (self.source, getattr(self.source, "sampler", None)):
            if callable(getattr(owner, "set_epoch", None)):
                owner.set_epoch(epoch)  # type: ignore[union-attr]
                return

    def state_dict(self) -> dict[str, Any]:
        return {"loader": None}  # no position of its own: a resumed epoch reads the iterable again (resume())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""

    def _prepared(self) -> list[Any]:
        """The prepared loaders a ``CombinedLoader`` reads (empty for any other iterable)."""
        leaves = self.source.flattened if isinstance(self.source, CombinedLoader) else []
        return [leaf for leaf in leaves if callable(getattr(leaf, "checkpoint_state_dict", None))]

    def epoch_start(self) -> list[dict[str, Any]] | None:
        """What a checkpoint keeps to resume this epoch exactly: each prepared loader's position at its start."""
        return self._start

    def global_batches(self) -> list[list[int | None]]:
        """Each prepared loader's samples (or stream items) per batch of all processes together and batches per
        pass of this process (None: unknown): what a checkpoint keeps beside :meth:`epoch_start`, so that a resume
        on other batch sizes (another process count) can tell which of its steps cover the saving run's."""
        return [_shape(leaf) for leaf in self._prepared()]

    def resume(self, batches: int, start: list[dict[str, Any]] | None,
               saved_batches: list[list[int | None]] | None = None) -> tuple[int, str | None]:
        """The next iteration continues this epoch after ``batches`` (the saving run's per-process count): it reads
        the epoch again from its start (``start``, from :meth:`epoch_start`, puts the prepared loaders there) and
        drops the batches done. ``saved_batches``: :meth:`global_batches` when the checkpoint was saved.

        Returns the batches done here and None when that is exact: every iterable inside is a prepared loader whose
        start was saved, and each takes the same global batch as when saved (on any process count, the same
        batches of all processes then form each step), or the batches done here hold what the saving run took
        (:func:`_replayed`). Else it is not exact, and the second item says why."""
        prepared = self._prepared()
        leaves = self.source.flattened if isinstance(self.source, CombinedLoader) else [self.source]
        if start is None or not len(start) == len(prepared) == len(leaves):
            self._skip = batches
            return batches, (f"it keeps no position (a {type(self.source).__name__} not made of DataLoaders "
                             "alone) and is read again from its start")
        for leaf, state in zip(prepared, start):
            leaf.load_state_dict(state)
        self._start = start
        done, problem = _replayed(batches, saved_batches, prepared, start)
        n = _length(self)
        self._skip = done if n is None else min(done, n)
        return self._skip, problem

    def _open(self) -> tuple[Iterator[Any], Any]:
        """The epoch's batches and its first one to hand out (after the batches a resume drops)."""
        skip, self._skip = self._skip, 0
        if not skip:  # each pass reads every loader from an epoch's start (one a pass left early moves on)
            prepared = self._prepared()
            for leaf in prepared:
                leaf.start_next_epoch()
            self._start = [leaf.checkpoint_state_dict() for leaf in prepared]
        source = self.source.batches() if isinstance(self.source, CombinedLoader) else iter(self.source)
        if self.max_batches is not None:
            source = itertools.islice(source, self.max_batches)
        if not skip:
            return source, next(source, _END)
        # The saved run had read these batches (and the one ahead) before its checkpoint, and the random states
        # it saved come after what reading them drew (a new epoch's seeds, random augmentations): kept as saved
        # (what a resume does again of the interrupted run's past must not draw twice).
        from ..accelerator import kept_rng_state

        with kept_rng_state(cuda=False):
            for _ in range(skip):
                next(source, None)
            return source, next(source, _END)

    def __iter__(self) -> Iterator[Any]:
        from ..accelerator import send_to_device

        skip = self._skip
        source, batch = self._open()
        self.end_of_dataloader, self.batches_yielded = False, skip
        stack = self._current
        try:
            while batch is not _END:
                upcoming = next(source, _END)  # one batch ahead, so that the last one is known while it runs
                self.end_of_dataloader = upcoming is _END
                if not stack or stack[-1] is not self:  # on top, over the prepared loaders a CombinedLoader reads
                    if self in stack:
                        stack.remove(self)
                    stack.append(self)
                self.batches_yielded += 1
                yield send_to_device(batch, self.device)
                batch = upcoming
        finally:
            if self in stack:
                stack.remove(self)


def batch_count(loader: Any) -> int | float:
    """Batches per epoch of a prepared loader: its length, else its batch limit, else inf (unknown)."""
    n = _length(loader)
    if n is None:
        n = getattr(loader, "max_batches", None)
    return math.inf if n is None else n


def check_iterable(item: Any, what: str) -> None:
    # A tensor iterates over its rows, not batches: passing one is a mistake, not a loader.
    if isinstance(item, torch.Tensor) or not callable(getattr(item, "__iter__", None)):
        raise TypeError(f"{what} is a {type(item).__name__}; the Trainer needs torch.utils.data.DataLoader objects "
                        "(it makes them resumable and shards them across processes) or other iterables of batches.")


def prepare_loader(acc: Accelerator, loader: Any, checkpointed: bool = True, even_batches: bool = True) -> Any:
    """A DataLoader prepared by the Accelerator; any other iterable read as it is (module docstring), the
    DataLoaders inside a ``CombinedLoader`` prepared. ``checkpointed=False``: not among the loaders whose positions
    the Accelerator's checkpoints hold (a loader read from its start each time), and its seed is not drawn from the
    global RNG (a resumed run prepares it at another point of the random stream). ``even_batches=False`` (with
    ``checkpointed=False``): the shares are not padded to as many batches each (prediction: each sample once)."""
    if not checkpointed:
        from ..accelerator import prepare_data_loader

        device = acc.device if acc.device_placement else None

        def prepare(leaf: DataLoader) -> Any:
            return prepare_data_loader(leaf, acc.loader_context, device, draw_seed=False,
                                       even_batches=None if even_batches else False)
    else:
        prepare = acc.prepare_data_loader
    if isinstance(loader, DataLoader):
        return prepare(loader)
    if isinstance(loader, CombinedLoader):
        loader = loader.map(lambda leaf: prepare(leaf) if isinstance(leaf, DataLoader) else leaf)
    return IterableLoader(loader, acc)


def replace_loader(acc: Accelerator, old: Any, new: Any) -> Any:
    """``reload_dataloaders_every_n_epochs``: the loader that replaces ``old`` for the next epochs."""
    if isinstance(new, DataLoader) and not isinstance(old, IterableLoader):
        return acc.replace_dataloader(old, new)
    return prepare_loader(acc, new)
