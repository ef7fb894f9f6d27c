"""`CSVLogger`: metrics in ``metrics.csv`` and hyperparameters in ``hparams.yaml``.

This module owns the CSV layout: a ``step`` column first, then one column per
metric in order of first appearance, one row per step. Rows are buffered in
memory and written in batches because a per-step file write would cost more
than the step itself for small models.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Mapping
from typing import Any

import torch

from stoker.loggers.base import Logger, params_to_dict, to_scalars

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Writes metrics to ``{save_dir}/{name}/version_{n}/metrics.csv``.

    Layout: the first column is ``step``, then one column per metric. Metrics
    logged at the same step share one row (a metric logged twice at the same
    step keeps its last value); only a step revisited after later steps were
    written starts a second row for it. A metric that first appears later
    widens the header: the file is rewritten with the new column, earlier rows
    leaving it empty. ``step=None`` means one past the largest step so far.

    Rows are kept in memory and written on ``flush``, on ``finalize`` and
    whenever ``flush_every_n_steps`` completed rows are waiting. The most recent
    row stays buffered on those automatic writes, because validation metrics
    often arrive at the same step as the last training metrics. If
    ``metrics.csv`` already exists (an explicit ``version`` reused on resume),
    new rows are appended to it.

    Hyperparameters go to ``hparams.yaml`` as JSON (a subset of YAML, so
    ``yaml.safe_load`` and ``json.load`` both read it); repeated calls merge.
    Logging after ``finalize`` keeps working and is written on the next flush.

    Args:
        save_dir: Root folder for all runs.
        name: Experiment name (sub-folder of ``save_dir``).
        version: ``None`` for the next free ``version_{n}``, an int, or a folder name.
        flush_every_n_steps: Write after this many completed rows are buffered.

    Example:
        >>> logger = CSVLogger("runs", name="mnist")
        >>> logger.log_metrics({"train/loss": 0.25}, step=0)
        >>> logger.log_metrics({"val/acc": 0.9}, step=0)  # same row as train/loss
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> open(os.path.join(logger.log_dir, "metrics.csv")).read()  # doctest: +SKIP
        'step,train/loss,val/acc\\n0,0.25,0.9\\n'
    """

    METRICS_FILE = "metrics.csv"
    HPARAMS_FILE = "hparams.yaml"

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "stoker_logs",
        version: int | str | None = None,
        flush_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version)
        if isinstance(flush_every_n_steps, bool) or not isinstance(flush_every_n_steps, int) or flush_every_n_steps < 1:
            raise ValueError(
                f"CSVLogger(flush_every_n_steps={flush_every_n_steps!r}) must be an int >= 1 "
                "(the number of rows to buffer before writing)."
            )
        self.flush_every_n_steps = flush_every_n_steps
        self._keys: list[str] = []  # every metric name seen, in order of first appearance
        self._pending: dict[int, dict[str, float | int]] = {}  # step -> row, not yet on disk
        self._open_step: int | None = None  # the row that may still receive metrics
        self._file_keys: list[str] | None = None  # header on disk; None until the file is inspected
        self._file_last_step: str | None = None  # as text, the way csv reads it back
        self._hparams: dict[str, Any] = {}

    @property
    def metrics_file_path(self) -> str:
        """Path of ``metrics.csv`` (may not exist yet)."""
        return os.path.join(self.log_dir, self.METRICS_FILE)

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Buffer ``metrics`` in the row for ``step``; write when enough rows are waiting."""
        values = to_scalars(metrics)
        if not values:
            return
        step = self._resolve_step(step)
        self._pending.setdefault(step, {}).update(values)
        self._open_step = step
        for key in values:
            if key not in self._keys:
                self._keys.append(key)
        if len(self._pending) > self.flush_every_n_steps:
            self._write(keep_open_row=True)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Merge ``params`` into ``hparams.yaml`` (written immediately; it is small and rare)."""
        self._hparams.update(_jsonable(params_to_dict(params)))
        os.makedirs(self.log_dir, exist_ok=True)
        path = os.path.join(self.log_dir, self.HPARAMS_FILE)
        _replace_file(path, json.dumps(self._hparams, indent=2, default=str) + "\n")

    def flush(self) -> None:
        """Write every buffered row to ``metrics.csv``."""
        self._write(keep_open_row=False)

    def finalize(self, status: str) -> None:
        """Write every buffered row. Safe to call repeatedly."""
        self.flush()

    def _write(self, keep_open_row: bool) -> None:
        rows = [
            {"step": step, **row}
            for step, row in self._pending.items()
            if not (keep_open_row and step == self._open_step)
        ]
        if not rows:
            return
        path = self.metrics_file_path
        if self._file_keys is None:
            self._inspect_existing_file(path)
        file_keys = self._file_keys or []
        widened = any(key not in file_keys for key in self._keys)
        continues_last_row = self._file_last_step is not None and str(rows[0]["step"]) == self._file_last_step
        if not os.path.exists(path) or widened or continues_last_row:
            self._rewrite(path, rows)
        else:
            with open(path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=["step", *file_keys], restval="", lineterminator="\n").writerows(rows)
        self._file_last_step = str(rows[-1]["step"])
        for row in rows:
            del self._pending[row["step"]]

    def _inspect_existing_file(self, path: str) -> None:
        """Adopt the header and last step of a ``metrics.csv`` left by an earlier run."""
        self._file_keys = []
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            last = None
            for last in reader:
                pass
            header = [key for key in (reader.fieldnames or []) if key != "step"]
        self._file_keys = header
        self._keys = header + [key for key in self._keys if key not in header]
        self._file_last_step = last["step"] if last is not None else None

    def _rewrite(self, path: str, rows: list[dict[str, Any]]) -> None:
        """Rewrite the whole file with the current header (new column, or merge into its last row)."""
        existing: list[dict[str, Any]] = []
        if os.path.exists(path):
            with open(path, newline="") as f:
                existing = list(csv.DictReader(f))
        if existing and rows and existing[-1].get("step") == str(rows[0]["step"]):
            existing[-1].update({k: v for k, v in rows[0].items() if k != "step"})
            rows = rows[1:]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", newline="") as f:
            # "ignore": a hand-edited row with surplus fields must not abort logging.
            writer = csv.DictWriter(
                f, fieldnames=["step", *self._keys], restval="", extrasaction="ignore", lineterminator="\n"
            )
            writer.writeheader()
            writer.writerows(existing)
            writer.writerows(rows)
        # Rename so a crash mid-rewrite leaves the previous complete file.
        os.replace(tmp, path)
        self._file_keys = list(self._keys)


def _jsonable(value: Any) -> Any:
    """Nested params with scalar tensors as numbers, Namespaces as dicts and str keys."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _replace_file(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
