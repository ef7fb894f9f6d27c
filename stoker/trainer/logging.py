"""What ``self.log`` records: per-step values, epoch reductions and torchmetrics, kept on the device.

Owns: validating a ``log`` call, the per-stage defaults (training hooks log per step, epoch-level hooks and
validation/test per epoch), the epoch reductions (batch-size-weighted mean, sum, max, min, optionally across
processes), torchmetrics ``Metric`` values (computed and reset at epoch end), and the Trainer's
``callback_metrics`` / ``progress_bar_metrics`` / ``logged_metrics`` dicts. As in Lightning, an evaluation's step
values go to the loggers and the progress bar only: ``callback_metrics`` gets the evaluation's values when its epoch
ends, so a callback never takes one batch's value for the result. Does not own *when* values go to the
loggers (``loops.py`` decides) or the loggers themselves (``stoker/loggers``).

Cost: a step-level ``log`` stores a detached reference (no copy, no device->host sync); an epoch-level mean adds
one multiply-add on the device. Values become Python numbers only inside a logger, at log time.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from .options import RunOptions


class LoggingGuard(Protocol):
    """``hooks.HookDispatcher``'s answer to "may ``self.log`` record now?": the refusing hook's name, or None."""

    refusing: str | None


class MetricsOwner(Protocol):
    """What :class:`Results` uses of the Trainer: the Accelerator (to reduce), the metric dicts it fills, and the
    hook dispatcher (which hook, if any, refuses logging now)."""

    accelerator: Accelerator
    hooks: LoggingGuard
    callback_metrics: dict[str, Any]
    progress_bar_values: dict[str, Any]  # the prog_bar values as logged (tensors); progress_bar_metrics reads them
    options: RunOptions  # record_logged_values: whether self.log records at all

_REDUCE_ALIASES = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
# torch's reductions and python's builtins of the same meaning (Lightning accepts both)
_REDUCE_BY_FN = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min", sum: "sum", max: "max",
                 min: "min"}


class UnloggableValueError(TypeError, ValueError):
    """``self.log`` got a value that is not a number: a ``TypeError`` (a wrong type), and a ``ValueError`` too, the
    class a Lightning script catches for the same mistake."""


def _across(acc: Accelerator, value: torch.Tensor, reduce: str) -> torch.Tensor:
    """``value`` reduced over the processes: "mean", "sum" (all-reduce), "max" or "min" (gathered)."""
    if reduce in ("max", "min"):
        gathered = acc.gather(value)
        return gathered.max() if reduce == "max" else gathered.min()
    return acc.reduce(value, reduce)


def _is_metric(value: Any) -> bool:
    # torchmetrics is imported only by users who pass a Metric, so we never import it here.
    tm = sys.modules.get("torchmetrics")
    return tm is not None and isinstance(value, tm.Metric)


def _reduce_name(reduce_fx: Any, name: str) -> str:
    key = _REDUCE_BY_FN.get(reduce_fx) if callable(reduce_fx) else \
        _REDUCE_ALIASES.get(reduce_fx.lower()) if isinstance(reduce_fx, str) else None
    if key is None:
        raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): not a reduction. Expected one of: "
                         "'mean' (weighted by batch_size), 'sum', 'max', 'min'.")
    return key


def infer_batch_size(batch: Any) -> int:
    """The size of dim 0 of the first tensor in ``batch`` (1 when there is none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = infer_batch_size(item)
            if size != 1 or isinstance(item, torch.Tensor):
                return size
    return 1


def check_log_scope(name: str, sync_dist: bool, sync_dist_group: Any, rank_zero_only: bool) -> None:
    """Refuses ``self.log`` options stoker cannot honour: a process group (values are reduced over every process)
    and ``sync_dist`` with ``rank_zero_only`` (the other processes would never join the reduction)."""
    if sync_dist_group is not None:
        raise ValueError(f"self.log({name!r}, sync_dist_group={sync_dist_group!r}): stoker reduces logged values "
                         "over all processes; pass sync_dist_group=None (the default).")
    if rank_zero_only and sync_dist:
        raise ValueError(f"self.log({name!r}, sync_dist=True, rank_zero_only=True): a value logged on the main "
                         "process only cannot be reduced across processes (the others would wait forever). Drop "
                         "one of them.")


def warn_outside_run(owner: str, name: str) -> None:
    """``self.log`` called with no Trainer running the module: the value is dropped (Lightning's words first, so that
    a warnings filter written for Lightning matches)."""
    warnings.warn("You are trying to `self.log()` but the `self.trainer` reference is not registered on the model "
                  f"yet: {owner}.log({name!r}) was called outside a Trainer run; the value is dropped. Call it from "
                  "training_step/validation_step or a hook.", stacklevel=3)


def warn_without_logger(name: str, loggers: list[Any]) -> None:
    """``self.log(..., logger=True)`` given explicitly on a Trainer without loggers: the value reaches no file
    (Lightning's words first, so that a warnings filter written for Lightning matches)."""
    if not loggers:
        warnings.warn(f"You called `self.log({name!r}, ..., logger=True)` but have no logger configured: the value "
                      "reaches callback_metrics and the progress bar only. Give the Trainer a logger, or log with "
                      "logger=False.", UserWarning, stacklevel=user_stacklevel())


def _refuse_step_outside_batch(name: str) -> None:
    raise ValueError(f"self.log({name!r}, on_step=True) outside a batch (in a hook such as on_train_start, "
                     "on_train_epoch_end or on_validation_epoch_end): there is no step to log it at. Drop "
                     "on_step=True; the value is then reduced over the epoch.")


# The entries of values logged outside a batch (on_train_epoch_start/_end...) are kept apart from the batches' ones
# under the same name, as Lightning keeps each hook's: the epoch end's value then replaces the batches' reduction
# instead of being averaged into it (a batch logged "acc" per step, the epoch end logs its own "acc").
_OUTSIDE_BATCH = "\x00outside-batch"


class _Entry:
    """One logged name of one stage: its options and its epoch accumulator."""

    __slots__ = ("key", "on_step", "on_epoch", "prog_bar", "logger", "reduce", "sync_dist", "metric", "total",
                 "weight", "updated")

    def __init__(self, key: str, on_step: bool, on_epoch: bool, prog_bar: bool, logger: bool, reduce: str,
                 sync_dist: bool) -> None:
        self.key, self.on_step, self.on_epoch = key, on_step, on_epoch
        self.prog_bar, self.logger, self.reduce, self.sync_dist = prog_bar, logger, reduce, sync_dist
        self.metric: Any = None
        self.total: Any = None
        self.weight: float = 0.0
        self.updated = False

    def add(self, value: Any, weight: float) -> None:
        total, reduce = self.total, self.reduce
        if reduce == "mean":
            value = value * weight
            self.total = value if total is None else total + value
            self.weight += weight
        elif total is None:
            self.total = value
        elif reduce == "sum":
            self.total = total + value
        elif isinstance(value, torch.Tensor) or isinstance(total, torch.Tensor):
            op = torch.maximum if reduce == "max" else torch.minimum
            self.total = op(torch.as_tensor(total), torch.as_tensor(value))
        else:
            self.total = max(total, value) if reduce == "max" else min(total, value)

    def names(self) -> tuple[str, str]:
        """The names of the step and the epoch value (suffixed when both are logged; a loader's
        ``/dataloader_idx_{i}`` stays last: ``loss_epoch/dataloader_idx_0``, as in Lightning)."""
        if self.on_step and self.on_epoch:
            base, slash, loader = self.key.partition("/dataloader_idx_")
            tail = slash + loader
            return f"{base}_step{tail}", f"{base}_epoch{tail}"
        return self.key, self.key


class Results:
    """The values logged during one stage (``"train"``, ``"validate"`` or ``"test"``) of a run.

    Example:
        >>> results = Results(trainer, "validate")
        >>> results.log("val/loss", loss, None, None, False, True, "mean", False, None)
        >>> results.finish_epoch()  # {"val/loss": tensor(...)} for the loggers; callback_metrics updated
    """

    def __init__(self, trainer: MetricsOwner, stage: str) -> None:
        self.trainer = trainer
        self.stage = stage
        self.training = stage == "train"
        self.entries: dict[str, _Entry] = {}
        self.step_values: dict[str, Any] = {}  # step values logged since the loggers last saw them
        self.batch: Any = None  # the current batch, for batch sizes
        self.suffix = ""  # "/dataloader_idx_{i}" while several eval loaders run
        # names logged with add_dataloader_idx=False while several loaders ran -> the suffixes of those loaders
        self.loader_names: dict[str, set[str]] = {}
        # Whether a batch is running, which decides the defaults of on_step/on_epoch, whether on_step=True is
        # allowed (a hook outside any batch, such as on_train_start or on_train_epoch_end, has no step to log
        # at) and which entries a name's values go to. The stage's loop keeps it; None: the loop does not say
        # (nothing is refused, one entry per name).
        self.in_batch: bool | None = False if stage == "train" else None
        self._batch_size_cache: tuple[Any, int] | None = None

    # -- recording --------------------------------------------------------------------------------------------------
    def log(self, name: str, value: Any, on_step: bool | None, on_epoch: bool | None, prog_bar: bool, logger: bool,
            reduce_fx: Any, sync_dist: bool, batch_size: int | None, add_dataloader_idx: bool = True) -> None:
        """Records ``value`` under ``name``; see :meth:`TrainingModule.log`."""
        if self.trainer.hooks.refusing is not None or not self.trainer.options.record_logged_values:
            return self._not_recorded(name)
        training_batch = self.in_batch is True and self.training
        if on_step is None:
            on_step = training_batch
        elif on_step and self.in_batch is False:
            _refuse_step_outside_batch(name)
        if on_epoch is None:
            on_epoch = not training_batch
        suffix = self.suffix if add_dataloader_idx else ""
        key = name + suffix if suffix else name
        slot = key + _OUTSIDE_BATCH if self.in_batch is False else key
        entry = self.entries.get(slot)
        if entry is None or entry.on_step != on_step or entry.on_epoch != on_epoch or entry.sync_dist != sync_dist:
            entry = self._new_entry(slot, key, name, on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist)
        if self.suffix and not suffix:  # logged from one of several loaders without its suffix: that loader's value
            for shown in (key, *entry.names()):
                self.loader_names.setdefault(shown, set()).add(self.suffix)
        metric = False
        if type(value) is torch.Tensor:  # the common case first: a loss from the step
            if value.numel() != 1:
                self._scalar(name, value)  # raises with the shape
            step_value = value = value.detach()
        elif _is_metric(value):
            metric = True
            entry.metric, step_value = value, getattr(value, "_forward_cache", None)
        else:
            step_value = value = self._scalar(name, value)
        if on_step and sync_dist and not metric:  # the step value across processes, by the entry's reduction
            acc = self.trainer.accelerator
            step_value = _across(acc, torch.as_tensor(value, dtype=torch.float32, device=acc.device), entry.reduce)
        if on_step and step_value is not None:
            step_name = entry.names()[0]
            self.step_values[step_name] = step_value
            if self.training:  # an evaluation's step values: loggers and progress bar only (see the module's doc)
                self.trainer.callback_metrics[step_name] = step_value
                if on_epoch:
                    self.trainer.callback_metrics[key] = step_value
            if prog_bar:
                self.trainer.progress_bar_values[step_name] = step_value
        if on_epoch and not metric:
            mean = entry.reduce == "mean"
            entry.add(value, (float(batch_size) if batch_size is not None else self._batch_size()) if mean else 1.0)
        entry.updated = True

    def _not_recorded(self, name: str) -> None:
        """``self.log`` where nothing records the value: in a hook that refuses logging (``hooks.NO_LOGGING``), a
        ``ValueError`` in Lightning's words; on a Trainer built with logging turned off, a warning."""
        refusing = self.trainer.hooks.refusing
        if refusing is not None:
            raise ValueError(f"You can't `self.log()` inside `{refusing}`. HINT: You can still log directly to the "
                             f"logger by using `self.logger.experiment`. (self.log({name!r}) in {refusing}: nothing "
                             "records a value logged there. Log it in a step or an epoch-end hook, such as "
                             "on_train_epoch_end or on_validation_epoch_end.)")
        warnings.warn(f"self.log({name!r}) records nothing: this Trainer was built with logging turned off "
                      "(Trainer(barebones=True), or RunOptions(record_logged_values=False)).", stacklevel=4)

    def _new_entry(self, slot: str, key: str, name: str, on_step: bool, on_epoch: bool, prog_bar: bool,
                   logger: bool, reduce_fx: Any, sync_dist: bool) -> _Entry:
        if not isinstance(name, str) or not name:
            raise TypeError(f"self.log(name={name!r}): the name must be a non-empty string.")
        if self.stage == "predict":
            raise RuntimeError(f"self.log({name!r}) during predict: prediction logs nothing. Return the values from "
                               "predict_step instead (Trainer.predict returns them).")
        if not (on_step or on_epoch):
            raise ValueError(f"`self.log(on_step=False, on_epoch=False)` is not useful: self.log({name!r}, "
                             "on_step=False, on_epoch=False) records nothing; set one of them.")
        entry = _Entry(key, on_step, on_epoch, bool(prog_bar), bool(logger), _reduce_name(reduce_fx, name),
                       bool(sync_dist))
        old = self.entries.get(slot)
        if old is not None and old.updated and old.on_epoch and on_epoch:
            entry.total, entry.weight, entry.metric = old.total, old.weight, old.metric
        self.entries[slot] = entry
        return entry

    @staticmethod
    def _scalar(name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"self.log({name!r}) got a tensor of shape {tuple(value.shape)}; log scalars "
                                 "(reduce it first, e.g. .mean(), or log its elements under separate names).")
            return value.detach()
        # A number becomes a (CPU) tensor, as Lightning keeps every logged value: callback_metrics and
        # logged_metrics hold tensors only. No device work: the tensor is made on the host, in float64, which
        # holds a Python number exactly (0.09 stays 0.09 for EarlyStopping's thresholds).
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return torch.tensor(float(value), dtype=torch.float64)
        if hasattr(value, "item") and not isinstance(value, Mapping):  # numpy scalars
            return torch.tensor(float(value.item()), dtype=torch.float64)
        raise UnloggableValueError(
            f"`self.log({name}, {value})` was called with a {type(value).__name__}: expected a number, a scalar "
            "tensor or a torchmetrics Metric (a dict of values goes to self.log_dict, one name each).")

    def _batch_size(self) -> float:
        cache = self._batch_size_cache
        if cache is not None and cache[0] is self.batch:
            return cache[1]
        refusal = getattr(self.batch, "unknown_batch_size", None)  # batch_iter.StepIterator: the step pulls its own
        if refusal is not None:
            raise refusal()
        size = infer_batch_size(self.batch)
        self._batch_size_cache = (self.batch, size)
        return size

    # -- reading ------------------------------------------------------------------------------------------------------
    def pop_step_values(self) -> dict[str, Any]:
        """Step values for the loggers (those with ``logger=True``) since the last call."""
        values, self.step_values = self.step_values, {}
        return {k: v for k, v in values.items() if self._logs(k)}

    def _logs(self, name: str) -> bool:
        entry = self.entries.get(name[:-5] if name.endswith("_step") else name)
        return entry is None or entry.logger

    def epoch_values(self) -> dict[str, tuple[_Entry, Any]]:
        """The epoch reductions of this stage so far: ``{name: (entry, value)}`` (collective when synced)."""
        out = {}
        for entry in self.entries.values():
            if entry.on_epoch and entry.updated:
                value = self._compute(entry)
                if value is not None:
                    out[entry.names()[1]] = (entry, value)
        return out

    def _compute(self, entry: _Entry) -> Any:
        if entry.metric is not None:
            return entry.metric.compute()
        total = entry.total
        if total is None:
            return None
        acc = self.trainer.accelerator
        if entry.sync_dist and acc.num_processes > 1:
            t = torch.as_tensor(total, dtype=torch.float32, device=acc.device)
            if entry.reduce != "mean":
                return _across(acc, t, entry.reduce)
            weight = acc.reduce(torch.tensor(entry.weight, device=acc.device), "sum")
            return acc.reduce(t, "sum") / weight
        if entry.reduce == "mean":
            return total / entry.weight if entry.weight else math.nan
        return total

    def publish_epoch(self) -> dict[str, Any]:
        """Computes the epoch values into ``callback_metrics``/``progress_bar_metrics``; returns the loggers' share."""
        trainer = self.trainer
        for_loggers = {}
        for name, (entry, value) in self.epoch_values().items():
            trainer.callback_metrics[name] = value
            trainer.callback_metrics[entry.key] = value
            if entry.prog_bar:
                trainer.progress_bar_values[name] = value
            if entry.logger:
                for_loggers[name] = value
        return for_loggers

    def reset_epoch(self) -> None:
        """Starts a new epoch: accumulators cleared, metrics reset."""
        for entry in self.entries.values():
            if entry.metric is not None and entry.updated:
                entry.metric.reset()
            entry.total, entry.weight, entry.updated = None, 0.0, False
        self.step_values = {}

    # -- checkpoints --------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Epoch accumulators (not torchmetrics states), so a mid-epoch resume keeps the epoch means exact. What hooks
        outside the batches logged is left out: a resumed epoch runs its start hooks again."""
        state = {}
        for key, e in self.entries.items():
            if key == e.key and e.on_epoch and e.updated and e.metric is None and e.total is not None:
                total = e.total.detach().cpu() if isinstance(e.total, torch.Tensor) else e.total
                state[key] = {"options": [e.on_step, e.on_epoch, e.prog_bar, e.logger, e.reduce, e.sync_dist],
                              "total": total, "weight": e.weight}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        device = self.trainer.accelerator.device
        for key, saved in state.items():
            entry = _Entry(key, *saved["options"])
            total = saved["total"]
            entry.total = total.to(device) if isinstance(total, torch.Tensor) else total
            entry.weight, entry.updated = float(saved["weight"]), True
            self.entries[key] = entry
