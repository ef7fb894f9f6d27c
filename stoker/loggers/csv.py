"""`CSVLogger`: metrics in ``metrics.csv`` and hyperparameters in ``hparams.yaml``, through an `ExperimentWriter`.

This module owns what a CSV run is to the Trainer: its folder and version (the `Logger` base), when held rows are
saved, and resuming a run. The file layout is the writer's (``csv_writer.py``); the writer is the logger's
``experiment``, created on first need, so constructing a logger touches no files.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

import torch

from stoker.loggers.base import (HPARAMS_YAML, Logger, check_log_folder, jsonable_params, main_process_experiment,
                                 params_to_dict, prefixed, to_scalars)
from stoker.loggers.csv_writer import ExperimentWriter
from stoker.loggers.hparams_yaml import ensure_hparams_yaml

__all__ = ["CSVLogger", "ExperimentWriter"]


class CSVLogger(Logger):
    """Writes metrics to ``{save_dir}/{name}/version_{n}/metrics.csv`` and hyperparameters to ``hparams.yaml``.

    Layout (see `ExperimentWriter`): the first column is ``step``, then one column per metric. Values logged at the
    same step share one row as long as none would replace another; a metric that first appears later widens the
    header. ``step=None`` means one past the largest step so far.

    Rows are held in memory and saved to the file by :meth:`save` (also :meth:`flush`, :meth:`finalize`), which
    ``log_metrics`` calls itself after logging a step ``s`` with ``(s + 1) % flush_every_n_steps == 0`` (Lightning's
    rule) or once ``flush_every_n_steps`` rows are held, whichever comes first. If ``metrics.csv`` already exists
    (an explicit ``version`` reused), new rows are appended to it with a warning. A run resumed with
    ``fit(ckpt_path=...)`` continues its checkpoint's version this way without a warning (``continue_run``): the
    rows after the checkpoint's step are dropped first, as those steps are trained (and logged) again.

    Hyperparameters go to ``hparams.yaml`` in block YAML, as Lightning writes it (``yaml.safe_load`` and
    ``load_from_checkpoint(hparams_file=...)`` read it); repeated calls merge. Logging after ``finalize`` keeps
    working and is written on the next save.

    Args:
        save_dir: Root folder for all runs. A file there (or above it) is an
            error here, at construction, not at the first write.
        name: Experiment name (sub-folder of ``save_dir``).
        version: ``None`` for the next free ``version_{n}``, an int, or a folder name.
        flush_every_n_steps: How often held rows are saved (see above); ``flush_logs_every_n_steps`` is
            Lightning's name for it.
        prefix: Put ``"{prefix}-"`` before every metric name.

    Example:
        >>> logger = CSVLogger("runs", name="mnist")
        >>> logger.log_metrics({"train/loss": 0.25}, step=0)
        >>> logger.log_metrics({"val/acc": 0.9}, step=0)  # same row as train/loss
        >>> logger.log_metrics({"val/acc": 0.8}, step=0)  # would replace 0.9: a second row for step 0
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> open(os.path.join(logger.log_dir, "metrics.csv")).read()  # doctest: +SKIP
        'step,train/loss,val/acc\\n0,0.25,0.9\\n0,,0.8\\n'
    """

    keeps_numbers_only = True  # Accelerate's tracker.log leaves text and media out (Logger.log)
    save_after_log = False  # rows are written on flush_every_n_steps's rule (log_metrics), not at every log

    METRICS_FILE = ExperimentWriter.NAME_METRICS_FILE
    HPARAMS_FILE = HPARAMS_YAML

    writes_files = True
    requires_logging_directory = True  # Accelerate's tracker attribute: its files go under the logging directory

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "stoker_logs",
        version: int | str | None = None,
        flush_every_n_steps: int = 100,
        *,
        prefix: str = "",
        flush_logs_every_n_steps: int | None = None,
    ) -> None:
        super().__init__(save_dir, name, version)
        if "://" in self.save_dir:  # would otherwise become a local folder named after the URL's scheme
            raise ValueError(f"CSVLogger(save_dir={self.save_dir!r}): writing to a URL (a remote file system) is not "
                             "supported; pass a local folder and copy the run to remote storage afterwards.")
        check_log_folder(self)
        if flush_logs_every_n_steps is not None:  # Lightning's name: the same setting
            if flush_every_n_steps not in (100, flush_logs_every_n_steps):
                raise ValueError(f"CSVLogger got flush_every_n_steps={flush_every_n_steps!r} and "
                                 f"flush_logs_every_n_steps={flush_logs_every_n_steps!r}; pass one of them.")
            flush_every_n_steps = flush_logs_every_n_steps
        if isinstance(flush_every_n_steps, bool) or not isinstance(flush_every_n_steps, int):
            raise TypeError(f"CSVLogger(flush_every_n_steps={flush_every_n_steps!r}) must be an int >= 1.")
        if flush_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_every_n_steps={flush_every_n_steps!r}) must be an int >= 1 "
                             "(how many steps to hold before writing).")
        if not isinstance(prefix, str):
            raise TypeError(f"CSVLogger(prefix={prefix!r}) must be a string.")
        self.flush_every_n_steps, self._prefix = flush_every_n_steps, prefix
        self._experiment: ExperimentWriter | None = None
        self._resume_after: int | None = None  # continue_run: the step the next writer drops the file's rows after

    @property
    @main_process_experiment
    def experiment(self) -> ExperimentWriter:
        """The run's `ExperimentWriter` (what writes ``metrics.csv`` and ``hparams.yaml``), created with the run's
        folder on first access: ``logger.experiment.log_metrics({"loss": 0.5}, step=3)``."""
        if self._experiment is None:
            self._experiment = ExperimentWriter(self.log_dir, resume_after=self._resume_after)
            self._resume_after = None
        return self._experiment

    @property
    def metrics_file_path(self) -> str:
        """Path of ``metrics.csv`` (may not exist yet)."""
        return os.path.join(self.log_dir, self.METRICS_FILE)

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Hold ``metrics`` in the row of ``step`` (see `ExperimentWriter.log_metrics`); save when it is time."""
        values = to_scalars(metrics)
        if not values:
            return
        step = self._resolve_step(step)
        experiment = self.experiment
        experiment.log_metrics({prefixed(key, self._prefix): value for key, value in values.items()}, step)
        if (step + 1) % self.flush_every_n_steps == 0 or len(experiment.metrics) >= self.flush_every_n_steps:
            self.save()

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace | None = None) -> None:
        """Merge ``params`` into ``hparams.yaml``, written at once (``None``: the file is written as it is)."""
        self.experiment.log_hparams(jsonable_params(params_to_dict(params if params is not None else {})))

    def save(self) -> None:
        """Write the held rows, and ``hparams.yaml`` when the run's folder has none yet (``{}`` for a module without
        hyperparameters, as Lightning's run folders always hold one)."""
        experiment = self.experiment
        experiment.save()
        ensure_hparams_yaml(self.log_dir, experiment.hparams)

    def continue_run(self, version: int | str | None, step: int) -> None:
        """Continue the checkpoint's version (see `Logger.continue_run`): new rows are appended to its
        ``metrics.csv``, and the rows the interrupted run wrote after ``step`` (steps trained again now) are dropped
        at the first write, so each step's values are in the file once and steps never go back."""
        self.flush()  # rows still held belong to the file they were logged for
        super().continue_run(version, step)
        self._experiment, self._resume_after = None, int(step)

    def flush(self) -> None:
        """Write every held row to ``metrics.csv`` (nothing before the first ``log_metrics``)."""
        if self._experiment is not None:
            self._experiment.save()

    def finalize(self, status: str) -> None:
        """Write every held row. Safe to call repeatedly."""
        self.flush()
