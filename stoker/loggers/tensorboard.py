"""`TensorBoardLogger`: scalars and hyperparameters in TensorBoard event files.

This module owns which file a `TensorBoardLogger` writes into: its own event file (``tb_event_file.py``, written
on the calling thread) until the user asks for ``experiment``, and from then on the ``SummaryWriter`` that
``experiment`` returns, so that one file of the run is being written at a time. It imports tensorboard only when
the first file is opened, because importing it costs about a second and pulls in protobuf; `import stoker` must
stay cheap.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers.base import (Logger, check_log_folder, flatten_params, jsonable_params, params_to_dict,
                                 to_scalars, write_hparams_yaml)

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from stoker.loggers.tb_event_file import EventFile

__all__ = ["TensorBoardLogger"]

# SummaryWriter's arguments other than log_dir; the logger's own event file honours the same ones.
_WRITER_ARGS = ("comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")


class TensorBoardLogger(Logger):
    """Writes metrics as TensorBoard scalars into ``{save_dir}/{name}/version_{n}``.

    Each metric becomes a scalar series whose x-axis is the ``step`` passed to
    ``log_metrics`` (with ``step=None``: one past the largest step logged so far).
    Hyperparameters go to TensorBoard's HPARAMS tab, written into this run's own
    event file (unlike ``SummaryWriter.add_hparams``, which starts a new
    sub-run): nested mappings are flattened with ``"/"`` and values that are not
    ``bool``/``int``/``float``/``str`` are stored as their ``str()``.

    The event file, and with it the run folder, is created on the first write.
    Scalars and hyperparameters are written on the calling thread, without
    ``SummaryWriter``'s writer thread (whose wake-ups cost the training loop
    about 0.35 ms per call): records reach the file when ``max_queue`` (10) are
    pending, every ``flush_secs`` (120), at ``flush()`` and at ``finalize()``,
    which the Trainer calls at the end of every run, also a failed one.
    ``experiment`` opens a ``SummaryWriter`` for everything else (images,
    histograms, graphs); from then on the scalars go through it too, into its
    file, so the run's files are written one after the other and TensorBoard
    reads them in order. ``finalize`` flushes and closes whichever is open and
    may be called any number of times; logging after ``finalize`` appends a new
    event file to the same folder, so ``fit`` followed by ``test`` ends up in
    one run.

    Lightning's options work as there: ``log_graph`` (the Trainer calls
    :meth:`log_graph` when ``fit`` starts; it traces ``module.example_input_array``
    through the module into the SummaryWriter), ``default_hp_metric`` (with no
    metrics, ``log_hyperparams`` logs ``hp_metric = -1`` so that the HPARAMS tab
    has a column), ``prefix`` (``"{prefix}-{name}"`` for every metric) and
    ``sub_dir`` (a folder inside the version folder). As Lightning's, it also
    keeps the hyperparameters in ``{log_dir}/hparams.yaml`` (merged over calls;
    ``load_from_checkpoint(hparams_file=...)`` reads it).

    Args:
        save_dir: Root folder for all runs. A file there (or above it) is an
            error here, at construction, not at the first write.
        name: Experiment name (sub-folder of ``save_dir``).
        version: ``None`` for the next free ``version_{n}``, an int, or a folder name.
        log_graph: Add the module's graph at the start of ``fit`` (needs ``example_input_array``).
        default_hp_metric: Log ``hp_metric = -1`` with hyperparameters given without metrics.
        prefix: Put ``"{prefix}-"`` before every metric name.
        sub_dir: Write into ``{save_dir}/{name}/version_{n}/{sub_dir}``.
        **summary_writer_kwargs: ``SummaryWriter``'s options (``flush_secs``,
            ``max_queue``, ``filename_suffix``, ``purge_step``, ``comment``),
            honoured by the logger's own event file too and passed to the
            ``SummaryWriter`` of ``experiment``; ``log_dir`` is chosen by the logger.

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
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike | None = None,
        **summary_writer_kwargs: Any,
    ) -> None:
        super().__init__(save_dir, name, version)
        for arg, value in (("log_graph", log_graph), ("default_hp_metric", default_hp_metric)):
            if not isinstance(value, bool):
                raise TypeError(f"TensorBoardLogger({arg}={value!r}) must be True or False.")
        if not isinstance(prefix, str):
            raise TypeError(f"TensorBoardLogger(prefix={prefix!r}) must be a string.")
        if sub_dir is not None and not isinstance(sub_dir, (str, os.PathLike)):
            raise TypeError(f"TensorBoardLogger(sub_dir={sub_dir!r}) must be a folder name (a str or path) or None.")
        self._log_graph, self._default_hp_metric, self._prefix = log_graph, default_hp_metric, prefix
        self._sub_dir = os.fspath(sub_dir) if sub_dir is not None else None
        check_log_folder(self)
        if "log_dir" in summary_writer_kwargs:
            raise TypeError(
                "TensorBoardLogger(log_dir=...) is not supported: the folder is "
                "{save_dir}/{name}/version_{n}. Pass save_dir, name and version instead."
            )
        unknown = sorted(set(summary_writer_kwargs) - set(_WRITER_ARGS))
        if unknown:
            raise TypeError(f"TensorBoardLogger got unknown options {unknown}; it takes save_dir, name, version and "
                            f"SummaryWriter's {', '.join(_WRITER_ARGS)}.")
        self._writer_kwargs = summary_writer_kwargs
        self._writer: SummaryWriter | None = None
        self._events: EventFile | None = None
        self._hparams: dict[str, Any] = {}  # what hparams.yaml holds

    def __getstate__(self) -> dict[str, Any]:
        # An open file (and a SummaryWriter's thread) cannot travel; a pickled
        # copy (e.g. sent to spawned workers) opens its own on first write.
        state = self.__dict__.copy()
        state["_writer"] = state["_events"] = None
        return state

    @property
    def log_dir(self) -> str:
        """``{save_dir}/{name}/version_{n}``, plus ``sub_dir`` when given."""
        folder = super().log_dir
        return os.path.join(folder, self._sub_dir) if self._sub_dir else folder

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    def _file(self) -> Any:
        """Where a summary goes now: the SummaryWriter's file once ``experiment`` was used, else the own one."""
        if self._writer is not None:
            return self._writer.file_writer
        if self._events is None:
            from stoker.loggers.tb_event_file import EventFile

            kwargs = {k: v for k, v in self._writer_kwargs.items() if k != "comment"}  # comment: log_dir's name only
            _wait_for_a_later_second(self.log_dir)
            self._events = EventFile(self.log_dir, **kwargs)
        return self._events

    @property
    def experiment(self) -> SummaryWriter:
        """The underlying ``SummaryWriter``, created (with the run folder) on first access.

        Use it for what the logger does not wrap: ``logger.experiment.add_image(...)``.
        """
        if self._writer is None:
            # Lazy on purpose: see the module docstring.
            from torch.utils.tensorboard import SummaryWriter

            if self._events is not None:  # its records first, then the writer's file after it
                self._events.close()
                self._events = None
            _wait_for_a_later_second(self.log_dir)
            self._writer = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Add each metric as a scalar at ``step``.

        All of them go into one event (one ``Summary`` holding a ``simple_value`` per metric, as ``add_scalar``
        would write each). TensorBoard reads them as the same scalar series.
        """
        self._write_scalars(to_scalars(metrics), self._resolve_step(step))

    def _prefixed(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` under the names they are written with (``"{prefix}-{name}"`` with a prefix)."""
        return {f"{self._prefix}-{key}": value for key, value in values.items()} if self._prefix else values

    def _write_scalars(self, values: dict[str, float | int], step: int) -> None:
        values = self._prefixed(values)
        file = self._file()
        if not values:
            return
        if file is self._events:  # the logger's own file: encoded with the next records written
            file.add_scalars(values, step)
            return
        from tensorboard.compat.proto.summary_pb2 import Summary

        file.add_summary(Summary(value=[Summary.Value(tag=key, simple_value=value) for key, value in values.items()]),
                         step)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace, metrics: Any = None,
                        step: int | None = None) -> None:
        """Record hyperparameters for TensorBoard's HPARAMS tab (flattened with ``"/"``).

        ``metrics`` (a dict, or one number logged as ``hp_metric``) are logged at ``step`` too and become the tab's
        columns; without them, ``default_hp_metric`` logs ``hp_metric = -1`` (Lightning's placeholder).
        """
        from torch.utils.tensorboard.summary import hparams

        nested = params_to_dict(params)
        self._hparams.update(jsonable_params(nested))
        write_hparams_yaml(self.log_dir, self._hparams)
        flat = flatten_params(nested)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        values = to_scalars(metrics)
        if values:  # at step 0 without a step, and without moving where log_metrics(step=None) continues
            self._write_scalars(values, 0 if step is None else int(step))
        # An empty metric dict is allowed: the tab then lists the run's
        # hyperparameters and the user picks metrics from the scalar tags.
        experiment, session_start, session_end = hparams(flat, self._prefixed(values))
        file = self._file()
        for summary in (experiment, session_start, session_end):
            file.add_summary(summary)

    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """With ``log_graph=True``: traces ``model`` on ``input_array`` (default: ``model.example_input_array``,
        moved to the model's device) into the SummaryWriter's graph tab. Warns and does nothing without an input."""
        if not self._log_graph:
            return
        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None or not isinstance(input_array, (torch.Tensor, tuple)):
            import warnings

            what = "is not set" if input_array is None else f"is a {type(input_array).__name__}"
            warnings.warn(f"TensorBoardLogger(log_graph=True) cannot add the graph: the input ({what}) must be a "
                          "tensor or a tuple of forward()'s positional arguments; set module.example_input_array.",
                          RuntimeWarning, stacklevel=2)
            return
        device = next((p.device for p in model.parameters()), None)
        if device is not None:
            moved = [t.to(device) if isinstance(t, torch.Tensor) else t
                     for t in (input_array if isinstance(input_array, tuple) else (input_array,))]
            input_array = tuple(moved) if isinstance(input_array, tuple) else moved[0]
        self.experiment.add_graph(model, input_array)

    def flush(self) -> None:
        """Push pending events to the event file (no-op before the first write)."""
        if self._events is not None:
            self._events.flush()
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str) -> None:
        """Flush and close the event file (and the writer). Safe to call repeatedly; later logging reopens."""
        if self._events is not None:
            self._events.close()
            self._events = None
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
