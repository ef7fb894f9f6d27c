"""`ThroughputMonitor`: samples, batches (and FLOPs and MFU) per second, sent to the Trainer's loggers.

Owns: counting batches, samples, items and FLOPs as they pass, the clock (validation time is not training time),
the metric names, and when values are computed. It does not synchronize the device per batch: counts are host-side
integers (``batch_size_fn`` reads shapes), the host clock is read once per optimizer step, and the device is
synchronized (CUDA) only when a value is computed, every ``log_every_n_steps`` optimizer steps in training and once
at the end of an evaluation run.

Names (``stage`` is ``train``, ``validate``, ``test`` or ``predict``): ``{stage}/device/batches_per_sec``,
``{stage}/device/samples_per_sec``, ``{stage}/device/items_per_sec`` (with ``length_fn``),
``{stage}/device/flops_per_sec`` and ``{stage}/device/mfu`` (with a FLOP count, and ``peak_flops`` for MFU), and
with several processes the job's totals without ``device/`` (this process's rate times the number of processes,
which assumes processes of equal speed, as Lightning's does). Running totals: ``{stage}/time``,
``{stage}/batches``, ``{stage}/samples`` (and ``{stage}/items``). ``separator`` replaces the ``/``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from stoker.callbacks.base import Callback, TrainerView, evaluation_hooks
from stoker.utilities.rank_zero import rank_zero_warn

__all__ = ["ThroughputMonitor"]

_STAGES = ("train", "validate", "test", "predict")


_Reading = tuple[float, int, int, int, float]  # time, batches, samples, items, flops


class _Meter:
    """Counts of one stage, its clock and the readings that rates are computed between.

    The clock advances only at readings (one ``time.perf_counter()`` each): ``time`` holds the stage's seconds up to
    the latest reading, ``mark`` is that reading (None while the stage is paused). A pause takes no reading: the
    stretch after the last reading is not counted, so training time runs from its start, or the end of a
    validation, to the end of its last optimizer step (the validation's own reading restarts it).
    """

    def __init__(self, window: int | None = None) -> None:
        self.time = 0.0  # seconds counted in earlier runs of the stage (and before a resume, for training)
        self.batches = self.samples = self.items = 0
        self.flops = 0.0
        self.mark: float | None = None
        # the readings rates are computed from: the previous computation's (no window), or the last `window` + 1
        self.readings: deque[_Reading] = deque(maxlen=None if window is None else window + 1)

    def start(self, now: float) -> None:
        self.mark = now
        self.readings.clear()
        self.readings.append(self.reading())

    def advance(self, now: float) -> None:
        if self.mark is not None:
            self.time += now - self.mark
        self.mark = now

    def reading(self) -> _Reading:
        return self.time, self.batches, self.samples, self.items, self.flops

    def take(self, windowed: bool) -> tuple[_Reading | None, _Reading]:
        """The reading now and the one rates go back to (None: not enough readings yet)."""
        current = self.reading()
        if not windowed:
            previous = self.readings[-1] if self.readings else None
            self.readings.clear()
            self.readings.append(current)
            return previous, current
        full = self.readings.maxlen is not None and len(self.readings) == self.readings.maxlen
        return (self.readings[0] if full else None), current


class ThroughputMonitor(Callback):
    """Measures training (and evaluation) throughput and logs it through the Trainer's loggers.

    Training rates cover the optimizer steps since the previous value (every ``trainer.log_every_n_steps`` steps,
    at the same ``step`` as the loss), or the last ``window_size`` steps; evaluation rates cover a whole
    validation/test/predict run and are logged when it ends. The clock is read once per optimizer step (and at
    each evaluation's start and end); training time runs to the end of the last step before a validation and
    restarts when it ends, so validation (and the epoch-end hooks before it) is not training time. The sanity check
    is not measured. The latest values are also kept in :attr:`metrics`. The main process logs; every process
    counts its own batches.

    The FLOPs of one batch (forward and backward, on this process) come from ``flops_per_batch``, or from the
    module's ``flops_per_batch`` attribute when that is None (Lightning's convention, e.g. measured with
    ``torch.utils.flop_counter.FlopCounterMode``); evaluation batches count a third of it (forward only) unless the
    module defines ``eval_flops_per_batch``. MFU is FLOPs per second over ``peak_flops`` (the device's peak for the
    precision used, e.g. 989e12 for an H100's dense bf16). Without either FLOP count it warns once, as Lightning does.

    Args:
        batch_size_fn: Samples in a batch; default: the length of the first tensor found in the batch.
        length_fn: Items (e.g. tokens) in a batch, for ``items_per_sec``; None: not measured.
        flops_per_batch: FLOPs of one training batch on one process, or None (see above).
        peak_flops: The device's peak FLOP/s, for ``mfu``; None: no MFU.
        log_every_n_steps: Compute the training rates every n optimizer steps; default: the Trainer's
            ``log_every_n_steps``.
        window_size: Training rates over the last ``window_size`` optimizer steps (Lightning's argument; none
            until that many were taken); None: over the steps since the previous value.
        separator: Between the parts of a metric's name (``"train|device|mfu"`` with ``"|"``).

    Attributes:
        metrics: The latest values, by name.

    Example:
        >>> monitor = ThroughputMonitor(length_fn=lambda batch: batch["input_ids"].numel(),
        ...                             flops_per_batch=6 * n_params * tokens_per_batch, peak_flops=989e12)
        >>> trainer = Trainer(callbacks=[monitor], log_every_n_steps=10)   # doctest: +SKIP
        >>> trainer.fit(module, loader)                                    # doctest: +SKIP
        >>> monitor.metrics["train/device/mfu"]                            # doctest: +SKIP
        0.41
    """

    def __init__(self, batch_size_fn: Callable[[Any], int] | None = None,
                 length_fn: Callable[[Any], int] | None = None, flops_per_batch: float | None = None,
                 peak_flops: float | None = None, log_every_n_steps: int | None = None,
                 window_size: int | None = None, separator: str = "/") -> None:
        _check_arguments(batch_size_fn, length_fn, flops_per_batch, peak_flops, log_every_n_steps, window_size,
                         separator)
        self.batch_size_fn = batch_size_fn or _infer_batch_size
        self.length_fn = length_fn
        self.flops_per_batch = flops_per_batch
        self.peak_flops = peak_flops
        self.log_every_n_steps = log_every_n_steps
        self.window_size = window_size
        self.separator = separator
        self.metrics: dict[str, float] = {}
        self._meters = {stage: _Meter(window_size if stage == "train" else None) for stage in _STAGES}
        self._last_step = -1
        self._warned_no_flops = False

    # -- counting -------------------------------------------------------------------------------------------------
    def _count(self, stage: str, module: Any, batch: Any) -> None:
        meter = self._meters[stage]
        meter.batches += 1
        meter.samples += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            meter.items += int(self.length_fn(batch))
        flops = self._flops(module, stage)
        if flops:
            meter.flops += flops

    def _flops(self, module: Any, stage: str) -> float | None:
        if self.flops_per_batch is not None:
            return self.flops_per_batch if stage == "train" else self.flops_per_batch / 3
        if stage != "train" and getattr(module, "eval_flops_per_batch", None) is not None:
            return float(module.eval_flops_per_batch)
        value = getattr(module, "flops_per_batch", None)
        if value is None:
            self._warn_no_flops(module)
            return None
        return float(value) if stage == "train" else float(value) / 3

    def _warn_no_flops(self, module: Any) -> None:
        """Once per callback, as Lightning does: without a FLOP count there is no ``flops_per_sec`` and no MFU."""
        if self._warned_no_flops or hasattr(module, "flops_per_batch"):
            return
        self._warned_no_flops = True
        rank_zero_warn(f"When using the `ThroughputMonitor`, you need to define a `flops_per_batch` attribute on "
                       f"{type(module).__name__} (or pass ThroughputMonitor(flops_per_batch=...)) to get "
                       "flops_per_sec and MFU; only batches, samples (and items) per second are measured.")

    @staticmethod
    def _now(trainer: TrainerView, sync: bool) -> float:
        """The clock; ``sync``: once the device has finished the work queued so far (CUDA), for a rate."""
        device = trainer.accelerator.device
        if sync and device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def _compute(self, trainer: TrainerView, stage: str) -> dict[str, float]:
        """The totals of ``stage`` at its latest reading, and the rates since the reading they go back to."""
        meter = self._meters[stage]
        previous, (now, *_) = meter.take(windowed=stage == "train" and self.window_size is not None)
        sep = self.separator
        values: dict[str, float] = {f"{stage}{sep}time": now, f"{stage}{sep}batches": float(meter.batches),
                                    f"{stage}{sep}samples": float(meter.samples)}
        if self.length_fn is not None:
            values[f"{stage}{sep}items"] = float(meter.items)
        if previous is None or now <= previous[0]:
            return values
        seconds = now - previous[0]
        processes = trainer.accelerator.num_processes
        rates = {"batches_per_sec": (meter.batches - previous[1]) / seconds,
                 "samples_per_sec": (meter.samples - previous[2]) / seconds}
        if self.length_fn is not None:
            rates["items_per_sec"] = (meter.items - previous[3]) / seconds
        if meter.flops > previous[4]:
            rates["flops_per_sec"] = (meter.flops - previous[4]) / seconds
        for name, rate in rates.items():
            values[f"{stage}{sep}device{sep}{name}"] = rate
            if processes > 1:
                values[f"{stage}{sep}{name}"] = rate * processes
        if "flops_per_sec" in rates and self.peak_flops:
            values[f"{stage}{sep}device{sep}mfu"] = rates["flops_per_sec"] / self.peak_flops
        return values

    def _log(self, trainer: TrainerView, values: dict[str, float]) -> None:
        self.metrics.update(values)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step)

    # -- training -------------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        self._meters["train"].start(self._now(trainer, sync=False))
        self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._count("train", module, batch)
        step = trainer.global_step
        if step == self._last_step:  # inside an accumulation window: no optimizer step to report yet
            return
        self._last_step = step
        due = step % (self.log_every_n_steps or trainer.log_every_n_steps) == 0
        meter = self._meters["train"]
        meter.advance(self._now(trainer, sync=due))  # every step: the end of the last one bounds training time
        if self.window_size is not None:
            meter.readings.append(meter.reading())
        if due:
            self._log(trainer, self._compute(trainer, "train"))

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        self._meters["train"].mark = None

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        for meter in self._meters.values():
            meter.mark = None

    # -- evaluation -----------------------------------------------------------------------------------------------
    def _eval_start(self, trainer: TrainerView, stage: str) -> None:
        if trainer.sanity_checking:
            return
        self._meters["train"].mark = None  # validation inside fit is not training time
        self._meters[stage].start(self._now(trainer, sync=False))

    def _eval_end(self, trainer: TrainerView, stage: str) -> None:
        meter = self._meters[stage]
        if trainer.sanity_checking or meter.mark is None:
            return
        now = self._now(trainer, sync=True)
        meter.advance(now)
        self._log(trainer, self._compute(trainer, stage))
        meter.mark = None
        if trainer.training or trainer.fitting:
            self._meters["train"].mark = now  # training time restarts with the same reading

    def _eval_batch(self, trainer: TrainerView, module: Any, batch: Any, stage: str) -> None:
        if not trainer.sanity_checking:
            self._count(stage, module, batch)

    on_validation_start, on_validation_batch_end, on_validation_end = evaluation_hooks("validate")
    on_test_start, on_test_batch_end, on_test_end = evaluation_hooks("test")
    on_predict_start, on_predict_batch_end, on_predict_end = evaluation_hooks("predict")

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The training totals, so that ``train/time``, ``train/samples``... continue across a resume, and the
        validation totals (under ``"validate"``), which also run on through the validations of a fit."""
        return {**_totals(self._meters["train"]), "validate": _totals(self._meters["validate"])}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._meters["train"] = _restored(state_dict, self.window_size)
        if "validate" in state_dict:  # absent from checkpoints of earlier versions
            self._meters["validate"] = _restored(state_dict["validate"], None)


def _totals(meter: _Meter) -> dict[str, Any]:
    return {"time": meter.time, "batches": meter.batches, "samples": meter.samples, "items": meter.items,
            "flops": float(meter.flops)}


def _restored(state: dict[str, Any], window: int | None) -> _Meter:
    """A meter that goes on from the totals of :func:`_totals`."""
    meter = _Meter(window)
    meter.time = float(state.get("time", 0.0))
    meter.batches, meter.samples = int(state.get("batches", 0)), int(state.get("samples", 0))
    meter.items, meter.flops = int(state.get("items", 0)), float(state.get("flops", 0.0))
    return meter


def _check_arguments(batch_size_fn: Any, length_fn: Any, flops_per_batch: Any, peak_flops: Any,
                     log_every_n_steps: Any, window_size: Any, separator: Any) -> None:
    for name, fn in (("batch_size_fn", batch_size_fn), ("length_fn", length_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"ThroughputMonitor({name}={fn!r}) must be a function of a batch, or None.")
    for name, value in (("flops_per_batch", flops_per_batch), ("peak_flops", peak_flops)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"ThroughputMonitor({name}={value!r}) must be a number > 0, or None.")
    for name, value, default in (("log_every_n_steps", log_every_n_steps, "the Trainer's log_every_n_steps"),
                                 ("window_size", window_size, "rates since the previous value")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"ThroughputMonitor({name}={value!r}) must be an int >= 1, or None ({default}).")
    if not isinstance(separator, str) or not separator:
        raise ValueError(f"ThroughputMonitor(separator={separator!r}) must be a non-empty string, e.g. '/'.")


def _infer_batch_size(batch: Any) -> int:
    """The length of the first tensor in ``batch`` (depth-first through dicts, lists and tuples)."""
    found = _first_tensor(batch)
    if found is None or found.ndim == 0:
        raise ValueError(f"ThroughputMonitor cannot tell the batch size of a {type(batch).__name__}: it holds no "
                         "tensor with a batch dimension. Pass ThroughputMonitor(batch_size_fn=lambda batch: ...).")
    return int(found.shape[0])


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None
