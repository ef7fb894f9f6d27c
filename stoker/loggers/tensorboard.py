"""`TensorBoardLogger`: scalars and hyperparameters in TensorBoard event files.

This module owns one `torch.utils.tensorboard.SummaryWriter` per logger. It
imports tensorboard only when the writer is first needed, because importing it
costs about a second and pulls in protobuf; `import stoker` must stay cheap.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers.base import Logger, check_log_folder, flatten_params, params_to_dict, to_scalars

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger(Logger):
    """Writes metrics as TensorBoard scalars into ``{save_dir}/{name}/version_{n}``.

    Each metric becomes a scalar series whose x-axis is the ``step`` passed to
    ``log_metrics`` (with ``step=None``: one past the largest step logged so far).
    Hyperparameters go to TensorBoard's HPARAMS tab, written into this run's own
    event file (unlike ``SummaryWriter.add_hparams``, which starts a new
    sub-run): nested mappings are flattened with ``"/"`` and values that are not
    ``bool``/``int``/``float``/``str`` are stored as their ``str()``.

    The writer, and with it the run folder, is created on the first write.
    ``finalize`` flushes and closes it and may be called any number of times;
    logging after ``finalize`` opens a new writer that appends a new event file
    to the same folder, so ``fit`` followed by ``test`` ends up in one run.

    Args:
        save_dir: Root folder for all runs. A file there (or above it) is an
            error here, at construction, not at the first write.
        name: Experiment name (sub-folder of ``save_dir``).
        version: ``None`` for the next free ``version_{n}``, an int, or a folder name.
        **summary_writer_kwargs: Passed to ``SummaryWriter`` (e.g. ``flush_secs``,
            ``max_queue``, ``filename_suffix``); ``log_dir`` is chosen by the logger.

    Example:
        >>> logger = TensorBoardLogger("runs", name="mnist")
        >>> logger.log_hyperparams({"lr": 1e-3, "optimizer": {"name": "adamw"}})  # doctest: +SKIP
        >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> logger.log_dir  # doctest: +SKIP
        'runs/mnist/version_0'
    """

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "stoker_logs",
        version: int | str | None = None,
        **summary_writer_kwargs: Any,
    ) -> None:
        super().__init__(save_dir, name, version)
        check_log_folder(self)
        if "log_dir" in summary_writer_kwargs:
            raise TypeError(
                "TensorBoardLogger(log_dir=...) is not supported: the folder is "
                "{save_dir}/{name}/version_{n}. Pass save_dir, name and version instead."
            )
        self._writer_kwargs = summary_writer_kwargs
        self._writer: SummaryWriter | None = None

    def __getstate__(self) -> dict[str, Any]:
        # An open SummaryWriter holds a thread and a file handle; a pickled
        # copy (e.g. sent to spawned workers) reopens its own on first write.
        state = self.__dict__.copy()
        state["_writer"] = None
        return state

    @property
    def experiment(self) -> SummaryWriter:
        """The underlying ``SummaryWriter``, created (with the run folder) on first access.

        Use it for what the logger does not wrap: ``logger.experiment.add_image(...)``.
        """
        if self._writer is None:
            # Lazy on purpose: see the module docstring.
            from torch.utils.tensorboard import SummaryWriter

            _wait_for_a_later_second(self.log_dir)
            self._writer = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Add each metric as a scalar at ``step``.

        All of them go into one event (one ``Summary`` holding a value per metric, as ``add_scalar`` would write
        each): one hand-over to the writer thread per call instead of one per metric. TensorBoard reads them as
        the same scalar series.
        """
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard.summary import scalar

        values = to_scalars(metrics)
        step = self._resolve_step(step)
        writer = self.experiment
        if values:
            summary = Summary(value=[scalar(key, value).value[0] for key, value in values.items()])
            writer.file_writer.add_summary(summary, step)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Record hyperparameters for TensorBoard's HPARAMS tab (flattened with ``"/"``)."""
        from torch.utils.tensorboard.summary import hparams

        flat = flatten_params(params_to_dict(params))
        # An empty metric dict is allowed: the tab then lists the run's
        # hyperparameters and the user picks metrics from the scalar tags.
        experiment, session_start, session_end = hparams(flat, {})
        file_writer = self.experiment.file_writer
        for summary in (experiment, session_start, session_end):
            file_writer.add_summary(summary)

    def flush(self) -> None:
        """Push pending events to the event file (no-op before the first write)."""
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str) -> None:
        """Flush and close the writer. Safe to call repeatedly; later logging reopens."""
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


def _wait_for_a_later_second(log_dir: str) -> None:
    """Waits (at most a second) until a new event file in ``log_dir`` will sort after the ones already there.

    TensorBoard reads a folder's event files in name order, and a writer names its file
    ``events.out.tfevents.<seconds>.<host>.<pid>.<n>``, ``n`` counting writers in the process as text: a writer
    reopened (logging after ``finalize``) in the same second as the file before it gets ``...9`` then ``...10``,
    which sorts first, and the run's earlier steps would be read after its later ones. A later second sorts right
    whatever ``n`` is. Costs nothing unless this logger's folder got a file in the current second.
    """
    stamps = []
    for path in glob.glob(os.path.join(glob.escape(log_dir), "events.out.tfevents.*")):
        field = os.path.basename(path).split(".")[3]
        if field.isdigit():
            stamps.append(int(field))
    if not stamps:
        return
    newest = max(stamps)
    while int(time.time()) <= newest:
        time.sleep(max(0.0, newest + 1 - time.time()) + 0.001)
