"""A prepared loader's saved position, checked, and carried over to another process count.

A loader's ``state_dict`` counts the batches *this process* took in the epoch, which means something else on
another process count. A checkpoint also stores the position in a form that does not depend on it
(:func:`portable_position`, the ``"position"`` entry):

- map-style data: the *inner batches* taken by all processes together (the batches of the batch sampler inside,
  whose order depends only on the seed and the epoch; round-robin, process p of n takes inner batches
  p, p+n, ...; with ``split_batches`` a 1/n slice of each), and the *samples* they hold when that sampler is
  torch's ``BatchSampler`` (every batch but the epoch's last is full);
- an iterable dataset: the *stream items* read by all processes together (each process reads the whole stream
  and keeps its part of every group of ``batch size x processes`` items).

:func:`plan_resume` turns a saved state into where this loader starts, refusing (``ProcessCountError``) where the
same global order cannot be continued exactly. It changes nothing, so a checkpoint can be checked before any
object is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch.utils.data import DataLoader

from .samplers import ShardedBatchSampler


class PreparedDataLoader(Protocol):
    """What this module reads of a prepared loader (``loader.PreparedDataLoader``, which imports this module)."""

    base_loader: DataLoader
    batches_yielded: int
    last_batch_out: bool
    epoch_start: tuple[int, int]
    rebased: bool

    @property
    def num_processes(self) -> int: ...

    @property
    def sharded_sampler(self) -> ShardedBatchSampler | None: ...

    @property
    def shards_stream(self) -> bool: ...

    @property
    def items_per_batch(self) -> int: ...

    def __len__(self) -> int: ...


class ProcessCountError(ValueError):
    """A loader position saved with another process count cannot be continued exactly here."""


@dataclass
class Resume:
    """Where a restored loader starts: ``batches`` of this process done in ``epoch``, which are ``start`` =
    (inner batches or stream items of all processes, batches of this process); ``rebased`` when the epoch
    continues from that global count (another process count), with ``items`` to drop from a stream; or
    torchdata's ``inner_state`` (an iterable on the same process count)."""

    epoch: int
    seed: int
    batches: int
    start: tuple[int, int] = (0, 0)
    rebased: bool = False
    items: int | None = None
    inner_state: Mapping[str, Any] | None = None


_MISSING = object()


def _integer(state: Mapping[str, Any], key: str, prefix: str = "", least: int | None = 0, optional: bool = False) -> Any:
    value = state.get(key, _MISSING)
    if optional and value in (None, _MISSING):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
        found = "missing" if value is _MISSING else f"{value!r:.80}"
        bound = "an integer" if least is None else f"an integer >= {least}"
        raise ValueError(f"key '{prefix}{key}' is {found}, expected {bound}")
    return value


def check_state(state: Any) -> None:
    """Raises ``ValueError`` naming the key when ``state`` is not a prepared loader's ``state_dict`` (a checkpoint
    altered or written by another tool)."""
    if not isinstance(state, Mapping):
        raise ValueError(f"the loader state is a {type(state).__name__}, expected a dict")
    _integer(state, "epoch")
    _integer(state, "batches_yielded")
    _integer(state, "seed", least=None)
    if "loader" in state and not isinstance(state["loader"], Mapping):
        raise ValueError(f"key 'loader' is a {type(state['loader']).__name__}, expected torchdata's state (a dict)")
    position = state.get("position")
    if position is None:  # saved before positions were recorded: read as saved by as many processes
        return
    if not isinstance(position, Mapping):
        raise ValueError(f"key 'position' is a {type(position).__name__}, expected a dict")
    _integer(position, "num_processes", "position.", least=1)
    for key in ("inner_batches", "samples", "items"):
        _integer(position, key, "position.", optional=True)
    for key in ("finished", "rebased"):
        if not isinstance(position.get(key, False), bool):
            raise ValueError(f"key 'position.{key}' is {position[key]!r:.80}, expected true or false")


def portable_position(loader: PreparedDataLoader) -> dict[str, Any]:
    """The ``"position"`` entry a checkpoint stores beside the loader's ``state_dict`` (see the module docstring)."""
    done, n = loader.batches_yielded, loader.num_processes
    length = loader_length(loader)
    finished = loader.last_batch_out or (length is not None and done >= length)
    position: dict[str, Any] = {"num_processes": n, "finished": finished, "rebased": loader.rebased}
    base, first = loader.epoch_start  # counting in this epoch started there (a restored position)
    sampler = loader.sharded_sampler
    if sampler is not None:
        inner = base + sampler.inner_batches_before(done - first)
        try:
            inner = min(inner, len(sampler.inner))
        except TypeError:
            pass
        size = sampler.plain_batch_size
        position.update(inner_batches=inner, samples=None if size is None else inner * size)
    elif loader.base_loader.num_workers == 0:  # with workers the stream is split among them: no global count
        position.update(items=base + (done - first) * loader.items_per_batch)
    return position


def loader_length(loader: PreparedDataLoader | DataLoader) -> int | None:
    """``len(loader)``, or None when the length is unknown (an iterable dataset without ``__len__``)."""
    try:
        return len(loader)
    except TypeError:
        return None


def plan_resume(loader: PreparedDataLoader, state: Any) -> Resume:
    """Where ``loader`` starts after loading ``state`` (see the module docstring); raises ``ValueError`` for a
    malformed state and ``ProcessCountError`` for a position it cannot continue exactly."""
    check_state(state)
    seed, epoch, done = int(state["seed"]), int(state["epoch"]), int(state["batches_yielded"])
    position = state.get("position") or {}
    saved = int(position.get("num_processes", loader.num_processes))
    length = loader_length(loader)
    # The same process count: as saved, unless the epoch was itself continued from a global count (then the
    # per-process count, and torchdata's state, do not tell where it is: by the global count, as on another one).
    if saved == loader.num_processes and not position.get("rebased"):
        if position.get("finished") or (length is not None and done >= length):  # saved on the last batch
            return Resume(epoch + 1, seed, 0)  # next is a fresh epoch
        if "loader" in state:  # torchdata restores its own position; the batches done still count (limits, len)
            start = (position.get("items") or 0, done)
            return Resume(epoch, seed, done, start=start, inner_state=state["loader"])
        return Resume(epoch, seed, done)
    if position.get("finished"):
        return Resume(epoch + 1, seed, 0)
    if loader.sharded_sampler is not None:
        resume = _map_style(loader, position, saved, epoch, seed)
    else:
        resume = _iterable(loader, position, saved, epoch, seed)
    if length is not None and resume.batches >= length:  # e.g. limit_batches ends the epoch before that point
        return Resume(epoch + 1, seed, 0)
    return resume


def _refusal(loader: PreparedDataLoader, saved: int, problem: str, fix: str) -> ProcessCountError:
    return ProcessCountError(f"the loader's position was saved by {saved} process(es) and this run has "
                             f"{loader.num_processes}: {problem}. {fix}")


def _map_style(loader: PreparedDataLoader, position: Mapping[str, Any], saved: int, epoch: int, seed: int) -> Resume:
    sampler = loader.sharded_sampler
    assert sampler is not None
    inner, samples = position.get("inner_batches"), position.get("samples")
    if inner is None:
        raise _refusal(loader, saved, "the checkpoint holds no map-style position for it (it was saved for an "
                       "iterable dataset)", "Prepare the same loaders in the same order as when saving.")
    size = sampler.plain_batch_size
    if samples is not None and size is not None:  # torch's BatchSampler on both sides: count samples
        if samples % size:
            raise _refusal(loader, saved, f"{samples} samples of epoch {epoch} were consumed, which is not a whole "
                           f"number of batches of the inner batch size {size} used now",
                           f"Resume with {saved} processes, or choose a batch size that divides {samples} (the "
                           "global batch of the saving run, or a divisor of it).")
        inner = samples // size
    local = sampler.local_batches_before(inner)
    return Resume(epoch, seed, local, start=(inner, local), rebased=True)


def _iterable(loader: PreparedDataLoader, position: Mapping[str, Any], saved: int, epoch: int, seed: int) -> Resume:
    items = position.get("items")
    if items is None or loader.base_loader.num_workers > 0:
        workers = loader.base_loader.num_workers
        raise _refusal(loader, saved, "an iterable dataset read by loader worker processes (num_workers="
                       f"{workers} now) splits the stream among them, so there is no position that holds on "
                       "another process count", f"Resume with {saved} processes, or use num_workers=0 in both runs "
                       "(or finish the epoch before changing the process count).")
    group = loader.items_per_batch
    if not loader.shards_stream and items % group:
        raise _refusal(loader, saved, f"{items} stream items of epoch {epoch} were consumed, which is not a whole "
                       f"number of batches of {group}", f"Resume with {saved} processes, or with a batch size "
                       f"that divides {items}.")
    return Resume(epoch, seed, items // group, start=(items, items // group), rebased=True, items=items)
