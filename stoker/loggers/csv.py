"""`CSVLogger`: metrics in ``metrics.csv`` and hyperparameters in ``hparams.yaml``.

This module owns the CSV layout: a ``step`` column first, then one column per
metric in order of first appearance, one row per step. Rows are buffered in
memory and written in batches because a per-step file write would cost more
than the step itself for small models.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from stoker.loggers.base import (HPARAMS_YAML, Logger, check_log_folder, jsonable_params, params_to_dict,
                                 to_scalars, write_hparams_yaml)
from stoker.loggers.hparams_yaml import ensure_hparams_yaml

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Writes metrics to ``{save_dir}/{name}/version_{n}/metrics.csv``.

    Layout: the first column is ``step``, then one column per metric. Values
    logged at the same step share one row as long as none would replace another:
    a metric that already has a *different* value in the step's newest row starts
    a new row for that step, so no logged value is ever lost (e.g. ``validate``
    after ``fit`` logs at the fit's last step: its values get their own row).
    A metric that first appears later widens the header: the file is rewritten
    with the new column, earlier rows leaving it empty. ``step=None`` means one
    past the largest step so far.

    Rows are kept in memory and written on ``flush``, on ``finalize`` and
    whenever ``flush_every_n_steps`` completed rows are waiting. The most recent
    row stays buffered on those automatic writes, because validation metrics
    often arrive at the same step as the last training metrics. If
    ``metrics.csv`` already exists (an explicit ``version`` reused on resume),
    new rows are appended to it (never merged into its rows). A run resumed
    with ``fit(ckpt_path=...)`` continues its checkpoint's version this way
    (``continue_run``): the rows after the checkpoint's step are dropped first,
    as those steps are trained (and logged) again.

    Hyperparameters go to ``hparams.yaml`` in block YAML, as Lightning writes it
    (``yaml.safe_load`` and ``load_from_checkpoint(hparams_file=...)`` read it);
    repeated calls merge.
    Logging after ``finalize`` keeps working and is written on the next flush.

    Args:
        save_dir: Root folder for all runs. A file there (or above it) is an
            error here, at construction, not at the first write.
        name: Experiment name (sub-folder of ``save_dir``).
        version: ``None`` for the next free ``version_{n}``, an int, or a folder name.
        flush_every_n_steps: Write after this many completed rows are buffered.

    Example:
        >>> logger = CSVLogger("runs", name="mnist")
        >>> logger.log_metrics({"train/loss": 0.25}, step=0)
        >>> logger.log_metrics({"val/acc": 0.9}, step=0)  # same row as train/loss
        >>> logger.log_metrics({"val/acc": 0.8}, step=0)  # would replace 0.9: a second row for step 0
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> open(os.path.join(logger.log_dir, "metrics.csv")).read()  # doctest: +SKIP
        'step,train/loss,val/acc\\n0,0.25,0.9\\n0,,0.8\\n'
    """

    METRICS_FILE = "metrics.csv"
    HPARAMS_FILE = HPARAMS_YAML

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "stoker_logs",
        version: int | str | None = None,
        flush_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version)
        check_log_folder(self)
        if isinstance(flush_every_n_steps, bool) or not isinstance(flush_every_n_steps, int) or flush_every_n_steps < 1:
            raise ValueError(
                f"CSVLogger(flush_every_n_steps={flush_every_n_steps!r}) must be an int >= 1 "
                "(the number of rows to buffer before writing)."
            )
        self.flush_every_n_steps = flush_every_n_steps
        self._keys: list[str] = []  # every metric name seen, in order of first appearance
        self._rows: list[dict[str, Any]] = []  # rows not yet on disk, oldest first; each has a "step"
        self._last: dict[str, Any] | None = None  # the newest row (pending or written): the one that may grow
        self._last_on_disk = False  # `_last` is the file's last line (growing it means rewriting that line)
        self._replace_file_last = False  # `_rows[0]` is the file's last line, grown since it was written
        self._file_keys: list[str] | None = None  # header on disk; None until the file is inspected
        self._hparams: dict[str, Any] = {}
        self._drop_after: int | None = None  # continue_run: rows of metrics.csv after this step go at the next write

    @property
    def metrics_file_path(self) -> str:
        """Path of ``metrics.csv`` (may not exist yet)."""
        return os.path.join(self.log_dir, self.METRICS_FILE)

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Add ``metrics`` to the newest row when it is at ``step`` and none is replaced, else start a row."""
        values = to_scalars(metrics)
        if not values:
            return
        step = self._resolve_step(step)
        last = self._last
        if last is not None and last["step"] == step and all(_same(last.get(k, v), v) for k, v in values.items()):
            last.update(values)
            if self._last_on_disk:  # grows the file's last line: pending again, replacing that line
                self._last_on_disk, self._replace_file_last = False, True
                self._rows.insert(0, last)
        else:
            self._last, self._last_on_disk = {"step": step, **values}, False
            self._rows.append(self._last)
        for key in values:
            if key not in self._keys:
                self._keys.append(key)
        if len(self._rows) > self.flush_every_n_steps:
            self._write(keep_open_row=True)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Merge ``params`` into ``hparams.yaml`` (written immediately; it is small and rare)."""
        self._hparams.update(jsonable_params(params_to_dict(params)))
        write_hparams_yaml(self.log_dir, self._hparams)

    def save(self) -> None:
        """Writes ``hparams.yaml`` when the run's folder has none yet (``{}`` for a module without hyperparameters)."""
        ensure_hparams_yaml(self.log_dir, self._hparams)

    def continue_run(self, version: int | str | None, step: int) -> None:
        """Continue the checkpoint's version (see `Logger.continue_run`): new rows are appended to its
        ``metrics.csv``, and the rows the interrupted run wrote after ``step`` (steps trained again now) are dropped
        at the first write, so each step's values are in the file once and steps never go back."""
        self.flush()  # rows still held belong to the file they were logged for
        super().continue_run(version, step)
        self._file_keys, self._last, self._last_on_disk, self._replace_file_last = None, None, False, False
        self._drop_after = int(step)

    def flush(self) -> None:
        """Write every buffered row to ``metrics.csv``."""
        self._write(keep_open_row=False)

    def finalize(self, status: str) -> None:
        """Write every buffered row. Safe to call repeatedly."""
        self.flush()

    def _write(self, keep_open_row: bool) -> None:
        rows = self._rows[:-1] if keep_open_row and self._rows and self._rows[-1] is self._last else self._rows
        if not rows:
            return
        path = self.metrics_file_path
        if self._file_keys is None:
            self._inspect_existing_file(path)
        file_keys = self._file_keys or []
        widened = any(key not in file_keys for key in self._keys)
        if not os.path.exists(path) or widened or self._replace_file_last:
            self._rewrite(path, rows, self._replace_file_last)
        else:
            with open(path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=["step", *file_keys], restval="", lineterminator="\n").writerows(rows)
        self._replace_file_last = False
        self._last_on_disk = rows[-1] is self._last
        self._rows = self._rows[len(rows):]

    def _inspect_existing_file(self, path: str) -> None:
        """Adopt the header of a ``metrics.csv`` left by an earlier run (new rows are appended after its rows);
        after ``continue_run``, drop its rows after the resumed step first."""
        self._file_keys = []
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = [key for key in (reader.fieldnames or []) if key != "step"]
            rows = list(reader) if self._drop_after is not None else []
        self._file_keys = header
        self._keys = header + [key for key in self._keys if key not in header]
        if self._drop_after is not None:  # a resumed run: the steps after its checkpoint are trained again
            kept = [row for row in rows if not _after(row.get("step"), self._drop_after)]
            self._drop_after = None
            if len(kept) < len(rows):
                self._rewrite_rows(path, kept)

    def _rewrite(self, path: str, rows: list[dict[str, Any]], replace_last: bool) -> None:
        """Rewrite the whole file with the current header (a new column, or its last line grown)."""
        existing: list[dict[str, Any]] = []
        if os.path.exists(path):
            with open(path, newline="") as f:
                existing = list(csv.DictReader(f))
        if replace_last and existing:
            existing.pop()
        self._rewrite_rows(path, existing + rows)

    def _rewrite_rows(self, path: str, rows: list[dict[str, Any]]) -> None:
        """``metrics.csv`` replaced by ``rows`` under the current header."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", newline="") as f:
            # "ignore": a hand-edited row with surplus fields must not abort logging.
            writer = csv.DictWriter(
                f, fieldnames=["step", *self._keys], restval="", extrasaction="ignore", lineterminator="\n"
            )
            writer.writeheader()
            writer.writerows(rows)
        # Rename so a crash mid-rewrite leaves the previous complete file.
        os.replace(tmp, path)
        self._file_keys = list(self._keys)


def _after(step: Any, limit: int) -> bool:
    """Whether a row's ``step`` text is a step after ``limit`` (a row without a readable step is kept)."""
    try:
        return int(step) > limit
    except (TypeError, ValueError):
        return False


def _same(old: Any, new: Any) -> bool:
    """Whether logging ``new`` over ``old`` loses nothing (equal values; NaN equals NaN)."""
    if old == new:
        return True
    return isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new)
