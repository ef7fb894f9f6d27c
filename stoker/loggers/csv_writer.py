"""`ExperimentWriter`: the files of one CSV run, ``metrics.csv`` and ``hparams.yaml``, in one folder.

This module owns the CSV layout: a ``step`` column first, then one column per metric in order of first appearance,
one row per step as long as no value would be replaced (see `ExperimentWriter.log_metrics`). Rows are held in memory
until `ExperimentWriter.save` because a file write per step would cost more than a small model's step; when to save
is the `CSVLogger`'s decision, not this module's. The writer is what ``CSVLogger.experiment`` returns (Lightning's
name and attributes), so code written against Lightning's CSV experiment keeps working.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

from stoker.loggers.hparams_yaml import HPARAMS_YAML, write_hparams_yaml

__all__ = ["ExperimentWriter"]


class ExperimentWriter:
    """Writes one run's ``metrics.csv`` and ``hparams.yaml`` into ``log_dir`` (created here).

    Values logged at the same step share one row as long as none would replace another: a metric that already has
    a *different* value in the step's newest row starts a new row for that step, so no logged value is lost (e.g.
    ``validate`` after ``fit`` logs at the fit's last step: its values get their own row). A metric that first
    appears later widens the header: the file is rewritten with the new column, earlier rows leaving it empty.

    A ``metrics.csv`` already in ``log_dir`` is kept and new rows are appended after its rows (a warning says so,
    unless the run is a resumed one: ``resume_after`` is then the checkpoint's step, and the file's rows after it
    are dropped at the first save, since those steps are trained and logged again).

    Attributes:
        metrics: The rows not yet saved, oldest first; each holds its ``"step"``.
        metrics_keys: The metric columns after ``step``, in order of first appearance.
        metrics_file_path: ``{log_dir}/metrics.csv``.
        hparams: Everything given to :meth:`log_hparams` so far (what ``hparams.yaml`` holds).

    Example:
        >>> writer = ExperimentWriter("runs/version_0")  # doctest: +SKIP
        >>> writer.log_metrics({"loss": 0.5}, step=0)  # doctest: +SKIP
        >>> writer.save()  # doctest: +SKIP
    """

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = HPARAMS_YAML

    def __init__(self, log_dir: str | os.PathLike, resume_after: int | None = None) -> None:
        self.log_dir = os.fspath(log_dir)
        self.metrics_file_path = os.path.join(self.log_dir, self.NAME_METRICS_FILE)
        self.metrics: list[dict[str, Any]] = []
        self.metrics_keys: list[str] = []
        self.hparams: dict[str, Any] = {}
        self._last: dict[str, Any] | None = None  # the newest row (pending or saved): the one that may grow
        self._last_on_disk = False  # `_last` is the file's last line (growing it means rewriting that line)
        self._replace_file_last = False  # `metrics[0]` is the file's last line, grown since it was written
        self._file_keys: list[str] | None = None  # header on disk; None until the file is inspected
        self._drop_after = resume_after
        if resume_after is None and os.path.isfile(self.metrics_file_path):
            warnings.warn(
                f"CSVLogger: {self.metrics_file_path!r} exists already (a version reused): new rows are appended "
                "after its rows. Pass no version (the next free one) or a new one for a fresh file. (Experiment "
                f"logs directory {self.log_dir} exists and is not empty; unlike Lightning, nothing there is "
                "deleted.)",
                UserWarning, stacklevel=3,
            )
        os.makedirs(self.log_dir, exist_ok=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Add ``metrics`` (plain numbers) to the newest row when it is at ``step`` and none is replaced, else start
        a row. ``step=None``: one past the newest row's step (0 for the first)."""
        if not metrics:
            return
        last = self._last
        if step is None:
            step = 0 if last is None else int(last["step"]) + 1
        if last is not None and last["step"] == step and all(_same(last.get(k, v), v) for k, v in metrics.items()):
            last.update(metrics)
            if self._last_on_disk:  # grows the file's last line: pending again, replacing that line
                self._last_on_disk, self._replace_file_last = False, True
                self.metrics.insert(0, last)
        else:
            self._last, self._last_on_disk = {"step": step, **metrics}, False
            self.metrics.append(self._last)
        self.metrics_keys.extend(key for key in metrics if key not in self.metrics_keys)

    def log_hparams(self, params: Mapping[str, Any]) -> None:
        """Merge ``params`` into ``hparams.yaml`` (written at once: it is small and rare)."""
        self.hparams.update(params)
        write_hparams_yaml(self.log_dir, self.hparams)

    def save(self) -> None:
        """Write the held rows to ``metrics.csv`` (appended, or the file rewritten when the header grew)."""
        rows = self.metrics
        if not rows:
            return
        path = self.metrics_file_path
        if self._file_keys is None:
            self._inspect_existing_file(path)
        file_keys = self._file_keys or []
        widened = any(key not in file_keys for key in self.metrics_keys)
        if not os.path.exists(path) or widened or self._replace_file_last:
            self._rewrite(path, rows, self._replace_file_last)
        else:
            with open(path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=["step", *file_keys], restval="", lineterminator="\n").writerows(rows)
        self._replace_file_last = False
        self._last_on_disk = rows[-1] is self._last
        self.metrics = []

    def _inspect_existing_file(self, path: str) -> None:
        """Adopt the header of a ``metrics.csv`` left by an earlier run (new rows go after its rows); for a resumed
        run, drop its rows after the resumed step first."""
        self._file_keys = []
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = [key for key in (reader.fieldnames or []) if key != "step"]
            rows = list(reader) if self._drop_after is not None else []
        self._file_keys = header
        self.metrics_keys = header + [key for key in self.metrics_keys if key not in header]
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
                f, fieldnames=["step", *self.metrics_keys], restval="", extrasaction="ignore", lineterminator="\n"
            )
            writer.writeheader()
            writer.writerows(rows)
        # Rename so a crash mid-rewrite leaves the previous complete file.
        os.replace(tmp, path)
        self._file_keys = list(self.metrics_keys)


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
