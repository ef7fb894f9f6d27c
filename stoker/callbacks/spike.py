"""`SpikeDetection`: stop a fit when the training loss jumps, and write down the batches to skip when resuming.

Owns: the running mean of the last ``window`` losses, the rule that calls a loss a spike, the agreement of all
processes (one process's spike stops every one), the file of batches to exclude, and its state across a resume.
"""

from __future__ import annotations

import collections
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["SpikeDetection", "TrainingSpikeException"]


class TrainingSpikeException(RuntimeError):
    """The training loss spiked at batch ``batch_idx`` (raised by :class:`SpikeDetection`)."""

    def __init__(self, batch_idx: int) -> None:
        super().__init__(f"Training loss spike at batch {batch_idx}: the batches to skip when resuming are listed in "
                         "SpikeDetection's exclude_batches_path.")
        self.batch_idx = batch_idx

    def __reduce__(self) -> tuple[type, tuple[int]]:
        # pickled with its batch index, not its message, so that it reads the same when it crosses processes
        # (``ddp_spawn`` sends a worker's exception to the parent)
        return type(self), (self.batch_idx,)


class SpikeDetection(Callback):
    """Stops ``fit`` with :class:`TrainingSpikeException` when a training batch's loss is a spike (Lightning's
    callback), after writing that batch and the one before it (which may have spoiled the weights) to a JSON list.

    A loss is compared with the mean of the last ``window`` finite losses once ``warmup`` batches have passed. It is
    a spike when it is not an improvement on the previous loss (lower for ``mode="min"``) and it is off that mean by
    at least ``atol`` and by at least ``rtol`` times the mean (a None tolerance always holds); with ``finite_only``
    a NaN or infinite loss is a spike too (without it such a loss is only left out of the mean). With several
    processes each checks its own loss, and one process's spike stops them all. Each check reads the loss from the
    device (and with several processes exchanges one number), so it costs a synchronisation per batch.

    Args:
        mode: ``"min"`` (the loss should fall) or ``"max"``.
        window: How many of the latest losses the mean is taken over.
        warmup: Batches (by index in the epoch) before checking starts.
        atol, rtol: The absolute and relative distances from the mean that make a spike.
        exclude_batches_path: A ``.json`` file, or a folder for ``skip_batches.json``; None: ``default_root_dir``.
        finite_only: Whether a NaN or infinite loss is a spike.

    Example:
        >>> detector = SpikeDetection(window=3, warmup=0, rtol=1.0)
        >>> [detector.is_spike(v) for v in (1.0, 0.9)], detector.is_spike(5.0)
        ([False, False], True)
    """

    def __init__(self, mode: str = "min", window: int = 10, warmup: int = 1, atol: float | None = None,
                 rtol: float | None = 2.0, exclude_batches_path: str | os.PathLike[str] | None = None,
                 finite_only: bool = True) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"SpikeDetection(mode={mode!r}) must be 'min' or 'max'.")
        for name, value, least in (("window", window, 1), ("warmup", warmup, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"SpikeDetection({name}={value!r}) must be an integer >= {least}.")
        for name, tolerance in (("atol", atol), ("rtol", rtol)):
            if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))):
                raise TypeError(f"SpikeDetection({name}={tolerance!r}) must be a number or None.")
        self.mode, self.window, self.warmup, self.atol, self.rtol = mode, window, warmup, atol, rtol
        self.exclude_batches_path, self.finite_only = exclude_batches_path, finite_only
        self.recent: collections.deque[float] = collections.deque(maxlen=window)  # the latest finite losses
        self.last_value = 0.0  # the previous loss taken in
        self.bad_batches: list[int] = []

    def is_spike(self, value: float) -> bool:
        """Whether ``value`` is a spike against the losses taken in so far; a loss that is not one is taken in
        (when finite). For a check of your own; a fit calls it with each training batch's loss."""
        spike = self._spike(value)
        if not spike and math.isfinite(value):
            self._take(value)
        return spike

    def _spike(self, value: float) -> bool:
        if not math.isfinite(value):
            return self.finite_only or (value > 0 if self.mode == "min" else value < 0)  # inf: off any mean
        if not self.recent:
            return False
        change = value - self.last_value
        if (change <= 0) if self.mode == "min" else (change >= 0):  # an improvement is never a spike
            return False
        mean = sum(self.recent) / len(self.recent)
        distance = abs(value - mean)
        return (self.atol is None or distance >= abs(self.atol)) and \
            (self.rtol is None or distance >= abs(self.rtol * mean))

    def _take(self, value: float) -> None:
        self.recent.append(value)
        self.last_value = value

    @torch.no_grad()
    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"SpikeDetection needs training_step to return the loss (a tensor, or a dict with 'loss');"
                            f" got {type(outputs).__name__}.")
        value = float(loss.detach().float().mean())
        spike = batch_idx >= self.warmup and self._spike(value)
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:  # one spike anywhere stops every process; a NaN anywhere keeps the mean
            flags = torch.tensor([float(spike), float(not math.isfinite(value))], device=accelerator.device)
            flags = accelerator.reduce(flags, "sum")
            spike, value = bool(flags[0] > 0), (value if flags[1] == 0 else math.nan)
        if spike:
            self._stop(trainer, batch_idx)
        if math.isfinite(value):
            self._take(value)

    def _stop(self, trainer: TrainerView, batch_idx: int) -> None:
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        path = os.fspath(self.exclude_batches_path or trainer.default_root_dir)
        path = path if path.endswith(".json") else os.path.join(path, "skip_batches.json")
        if trainer.is_global_zero:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.bad_batches, f, indent=2)
        raise TrainingSpikeException(batch_idx)

    def state_dict(self) -> dict[str, Any]:
        return {"recent": list(self.recent), "last_value": self.last_value, "bad_batches": list(self.bad_batches)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.recent = collections.deque(state_dict["recent"], maxlen=self.window)
        self.last_value = float(state_dict["last_value"])
        self.bad_batches = list(state_dict["bad_batches"])
