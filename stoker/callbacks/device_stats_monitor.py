"""`DeviceStatsMonitor`: the device's memory figures (and the host's CPU load) sent to the loggers during a run.

Owns: which figures are read for which device, their names (``DeviceStatsMonitor.{hook}/{figure}``, Lightning's),
and when they are read. A CUDA device gives its caching allocator's counters (``torch.cuda.memory_stats``: host
bookkeeping, no device synchronisation); the CPU gives ``psutil``'s system-wide CPU, memory and swap use.

Cadence: a training figure is read at most once per optimizer step, on the steps whose values the Trainer sends to
its loggers (every ``log_every_n_steps``): at the batch start that opens such a step's window it is logged at that
step (``global_step + 1``), at the batch end that closes it at the same step. Validation and test batches are read
every ``log_every_n_steps``-th batch and logged at the run's current ``global_step``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from stoker.callbacks.base import Callback, TrainerView
from stoker.callbacks.lr_monitor import NoLoggerError

__all__ = ["DeviceStatsMonitor"]

CPU_FIGURES = ("cpu_vm_percent", "cpu_percent", "cpu_swap_percent")


def cpu_stats() -> dict[str, float]:
    """System-wide CPU use, memory use and swap use, in percent (``psutil``)."""
    import psutil

    return {"cpu_vm_percent": float(psutil.virtual_memory().percent),
            "cpu_percent": float(psutil.cpu_percent()),
            "cpu_swap_percent": float(psutil.swap_memory().percent)}


def device_stats(device: torch.device) -> dict[str, float]:
    """The caching allocator's counters of a CUDA ``device`` (bytes and counts); nothing for another device."""
    if device.type != "cuda":
        return {}
    return {name: float(value) for name, value in torch.cuda.memory_stats(device).items()
            if isinstance(value, (int, float))}


class DeviceStatsMonitor(Callback):
    """Logs the device's memory figures, and on a CPU the host's CPU, memory and swap use, as Lightning's callback.

    Each figure is logged as ``DeviceStatsMonitor.{hook}/{figure}`` from ``on_train_batch_start/end``,
    ``on_validation_batch_start/end`` and ``on_test_batch_start/end``, by the main process, on the steps the
    Trainer logs (see the module's notes). Reading them costs no device synchronisation.

    Args:
        cpu_stats: Whether to log the CPU figures (``cpu_percent``, ``cpu_vm_percent``, ``cpu_swap_percent``;
            ``psutil`` is needed). None: only when the run's device is the CPU.

    Raises:
        NoLoggerError: when a fit starts on a Trainer without loggers (``logger=False``; not in a ``fast_dev_run``).
        ModuleNotFoundError: when a fit starts, CPU figures are wanted and ``psutil`` is not installed.

    Example:
        >>> trainer = Trainer(callbacks=[DeviceStatsMonitor()], log_every_n_steps=10)  # doctest: +SKIP
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise TypeError(f"DeviceStatsMonitor(cpu_stats={cpu_stats!r}): expected True, False or None.")
        self.cpu_stats = cpu_stats
        self._logged: dict[str, int] = {}  # training hook -> the step it last logged (one point per step)

    def _wants_cpu(self, device: torch.device) -> bool:
        return self.cpu_stats is True or (self.cpu_stats is None and device.type == "cpu")

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers and not trainer.dry_run:  # a debugging run (fast_dev_run) logs nothing anyway
            raise NoLoggerError("DeviceStatsMonitor has no logger to write to: the Trainer was built with "
                                "logger=False. Pass logger=True (TensorBoard), a stoker Logger, or drop the callback.")
        if self._wants_cpu(trainer.accelerator.device) and importlib.util.find_spec("psutil") is None:
            raise ModuleNotFoundError("DeviceStatsMonitor logs CPU figures here, and psutil is not installed: "
                                      "pip install psutil, or pass cpu_stats=False.")
        self._logged = {}

    def _log(self, trainer: TrainerView, hook: str, step: int) -> None:
        if not trainer.is_global_zero or not trainer.loggers or trainer.sanity_checking:
            return
        device = trainer.accelerator.device
        figures = device_stats(device)
        if self._wants_cpu(device):
            figures.update(cpu_stats())
        if not figures:
            return
        named = {f"{type(self).__name__}.{hook}/{name}": value for name, value in figures.items()}
        for logger in trainer.loggers:
            logger.log_metrics(named, step=step)

    def _train_step(self, trainer: TrainerView, hook: str, step: int) -> None:
        if step > 0 and step % trainer.log_every_n_steps == 0 and self._logged.get(hook) != step:
            self._logged[hook] = step
            self._log(trainer, hook, step)

    def on_train_batch_start(self, trainer: TrainerView, module: Any, batch: Any, batch_idx: int) -> None:
        self._train_step(trainer, "on_train_batch_start", trainer.global_step + 1)  # the step this batch works on

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.window_closed:  # the step is applied (or skipped): its number is global_step now
            self._train_step(trainer, "on_train_batch_end", trainer.global_step)

    def _eval(self, trainer: TrainerView, hook: str, batch_idx: int) -> None:
        if batch_idx % trainer.log_every_n_steps == 0:
            self._log(trainer, hook, trainer.global_step)

    def on_validation_batch_start(self, trainer: TrainerView, module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._eval(trainer, "on_validation_batch_start", batch_idx)

    def on_validation_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._eval(trainer, "on_validation_batch_end", batch_idx)

    def on_test_batch_start(self, trainer: TrainerView, module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._eval(trainer, "on_test_batch_start", batch_idx)

    def on_test_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._eval(trainer, "on_test_batch_end", batch_idx)
