"""`TensorBoardLogger`: scalars and hyperparameters in TensorBoard event files.

This module owns when a `TensorBoardLogger` opens and closes TensorBoard's own ``SummaryWriter`` (the one that
``experiment`` returns; every scalar and hyperparameter goes through it), when scalars are handed to it, and that
what the logger and the writer still hold reaches the file at interpreter exit. It imports tensorboard only when
the first file is opened, because importing it costs about a second and pulls in protobuf; `import stoker` must
stay cheap.

Why scalars are held and handed over in batches: each event given to ``SummaryWriter`` wakes its writer thread,
which then competes with the training thread for the interpreter lock. One hand-over per ``log_metrics`` call
cost ~250 us of training time (benchmarks/step_times.py, tiny-300 at the default ``log_every_n_steps=50``:
~2.6 ms per 300-step epoch, ~2.3% of its time); handing ``max_queue`` of them over at once brings that to one wake-up
per ``max_queue`` calls. Scalars are handed over when ``max_queue`` are held, when ``flush_secs`` have passed
since the last hand-over, at ``flush``/``finalize``, before anything else is written, and at interpreter exit.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import glob
import os
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers._packages import is_installed
from stoker.loggers.base import (Logger, check_log_folder, flatten_params, jsonable_params, main_process_experiment,
                                 params_to_dict, prefixed, to_scalars, write_hparams_yaml)
from stoker.loggers.hparams_yaml import HPARAMS_YAML, ensure_hparams_yaml

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger"]

# Lightning's flag under its module path: whether the writer's package is installed (found, not imported)
_TENSORBOARD_AVAILABLE = is_installed("tensorboard")

# SummaryWriter's arguments other than log_dir.
_WRITER_ARGS = ("comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")


class TensorBoardLogger(Logger):
    """Writes metrics as TensorBoard scalars into ``{save_dir}/{name}/version_{n}``.

    Each metric becomes a scalar series whose x-axis is the ``step`` passed to
    ``log_metrics`` (with ``step=None``: one past the largest step logged so far).
    Hyperparameters go to TensorBoard's HPARAMS tab, written into this run's own
    event file (unlike ``SummaryWriter.add_hparams``, which starts a new
    sub-run): nested mappings are flattened with ``"/"`` and values that are not
    ``bool``/``int``/``float``/``str`` are stored as their ``str()``.

    The event file, and with it the run folder, is created on the first write,
    by the ``SummaryWriter`` that ``experiment`` returns (use it for images,
    histograms, graphs). Records reach the file when ``max_queue`` (10) are
    pending, every ``flush_secs`` (120), at ``flush()``, at ``finalize()``
    (which the Trainer calls at the end of every run, also a failed one) and at
    interpreter exit, so a script that never calls ``finalize`` keeps every
    value. ``finalize`` may be called any number of times; logging after it
    appends a new event file to the same folder, so ``fit`` followed by
    ``test`` ends up in one run.

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
            passed to the ``SummaryWriter``; ``log_dir`` is chosen by the logger.

    Example:
        >>> logger = TensorBoardLogger("runs", name="mnist")
        >>> logger.log_hyperparams({"lr": 1e-3, "optimizer": {"name": "adamw"}})  # doctest: +SKIP
        >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> logger.log_dir  # doctest: +SKIP
        'runs/mnist/version_0'
    """

    NAME_HPARAMS_FILE = HPARAMS_YAML  # the run's hyperparameters beside its event files (Lightning's attribute)

    writes_files = True
    requires_logging_directory = True
    save_after_log = False  # the event file writes itself; save() only writes hparams.yaml, once

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
        self._at_exit: functools.partial | None = None
        self._max_queue = int(summary_writer_kwargs.get("max_queue", 10))  # SummaryWriter's defaults
        self._flush_secs = float(summary_writer_kwargs.get("flush_secs", 120))
        self._held: list[tuple[float, int, dict[str, float | int]]] = []  # (wall time, step, values) not handed over
        self._handed_over = float("-inf")  # time.monotonic() of the last hand-over: the first one is at once
        self._hparams: dict[str, Any] = {}  # what hparams.yaml holds
        self._purge_from: int | None = None  # continue_run: the first step the next writer hides earlier events of
        self._continued = False  # continue_run was called: the version holds the hp_metric placeholder already

    def __getstate__(self) -> dict[str, Any]:
        # An open file (and a SummaryWriter's thread) cannot travel; a pickled
        # copy (e.g. sent to spawned workers) opens its own on first write.
        state = self.__dict__.copy()
        state["_writer"] = state["_at_exit"] = None
        state["_held"] = []  # they belong to the original's file
        return state

    @property
    def log_dir(self) -> str:
        """``{save_dir}/{name}/version_{n}``, plus ``sub_dir`` when given."""
        folder = super().log_dir
        return os.path.join(folder, self._sub_dir) if self._sub_dir else folder

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    @main_process_experiment
    def experiment(self) -> SummaryWriter:
        """The underlying ``SummaryWriter``, created (with the run folder) on first access.

        Use it for what the logger does not wrap: ``logger.experiment.add_image(...)``.
        """
        self._hand_over()  # the logger's scalars first, so that the file holds the run in the order it was logged
        return self._open_writer()

    # Accelerate's TensorBoardTracker names: the writer (``tracker.writer.add_images(...)``) and the event folder.
    writer = tracker = experiment
    logging_dir = property(lambda self: self.log_dir, doc="The folder of the event files: ``log_dir``.")

    def _open_writer(self) -> SummaryWriter:
        if self._writer is None:
            # Lazy on purpose: see the module docstring.
            from torch.utils.tensorboard import SummaryWriter

            _wait_for_a_later_second(self.log_dir)
            kwargs = dict(self._writer_kwargs)
            if self._purge_from is not None:  # once: a later reopen (test after fit) must not hide the fit's steps
                kwargs["purge_step"], self._purge_from = self._purge_from, None
            self._writer = SummaryWriter(log_dir=self.log_dir, **kwargs)
            # SummaryWriter's thread is a daemon: what it still queues at exit would be lost without this.
            self._at_exit = functools.partial(_flush_at_exit, weakref.ref(self), os.getpid())
            atexit.register(self._at_exit)
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Add each metric as a scalar at ``step``.

        All of them go into one event (one ``Summary`` holding a ``simple_value`` per metric, as ``add_scalar``
        would write each). TensorBoard reads them as the same scalar series.
        """
        self._write_scalars(to_scalars(metrics), self._resolve_step(step))

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log``: numbers (and one-element tensors) as scalars, strings as text
        (``add_text``), mappings of numbers as ``add_scalars``; ``kwargs`` (``walltime``, ...) go to those calls.

        Without ``kwargs`` the scalars take :meth:`log_metrics`' path (held and handed over in batches).
        """
        step = self._resolve_step(step)
        texts = {k: v for k, v in values.items() if isinstance(v, str)}
        groups = {k: v for k, v in values.items() if isinstance(v, Mapping)}
        scalars = to_scalars({k: v for k, v in values.items() if k not in texts and k not in groups})
        if kwargs:
            for key, value in self._prefixed(scalars).items():
                self.experiment.add_scalar(key, value, global_step=step, **kwargs)
        else:
            self._write_scalars(scalars, step)
        for key, text in self._prefixed(texts).items():
            self.experiment.add_text(key, text, global_step=step, **kwargs)
        for key, group in self._prefixed(groups).items():
            self.experiment.add_scalars(key, to_scalars(group), global_step=step, **kwargs)

    def log_images(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log_images``: ``add_images(key, images, step, **kwargs)`` for each entry (a batch
        of images: an array or tensor, ``NCHW`` unless ``dataformats`` says otherwise)."""
        step = self._resolve_step(step)
        for key, images in self._prefixed(dict(values)).items():
            self.experiment.add_images(key, images, global_step=step, **kwargs)

    def _prefixed(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` under the names they are written with (``"{prefix}-{name}"`` with a prefix)."""
        return {prefixed(key, self._prefix): value for key, value in values.items()}

    def _write_scalars(self, values: dict[str, float | int], step: int) -> None:
        values = self._prefixed(values)
        self._open_writer()  # opened even without values: the run folder exists after a call
        if values:
            self._held.append((time.time(), step, values))
            if len(self._held) >= self._max_queue or time.monotonic() - self._handed_over >= self._flush_secs:
                self._hand_over()

    def _hand_over(self) -> None:
        """Gives the held scalars to the writer: one event (a ``Summary`` with a value per metric) per call."""
        if not self._held:
            return
        from tensorboard.compat.proto.summary_pb2 import Summary

        file_writer = self._open_writer().file_writer
        for wall_time, step, values in self._held:
            summary = Summary(value=[Summary.Value(tag=key, simple_value=value) for key, value in values.items()])
            file_writer.add_summary(summary, step, wall_time)
        self._held = []
        self._handed_over = time.monotonic()

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
        if metrics is None:  # a continued run's version holds the placeholder already: not twice at step 0
            metrics = {"hp_metric": -1} if self._default_hp_metric and not self._continued else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        values = to_scalars(metrics)
        if values:  # at step 0 without a step, and without moving where log_metrics(step=None) continues
            self._write_scalars(values, 0 if step is None else int(step))
        # An empty metric dict is allowed: the tab then lists the run's
        # hyperparameters and the user picks metrics from the scalar tags.
        experiment, session_start, session_end = hparams(flat, self._prefixed(values))
        for summary in (experiment, session_start, session_end):
            self.experiment.file_writer.add_summary(summary)

    def save(self) -> None:
        """Writes ``hparams.yaml`` when the run's folder has none yet (``{}`` for a module without hyperparameters)."""
        ensure_hparams_yaml(self.log_dir, self._hparams)

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
        # A module that knows how to be traced outside a run says so (TrainingModule: no Trainer needed then).
        exporting = getattr(model, "exporting", None)
        with exporting() if callable(exporting) else contextlib.nullcontext():
            self.experiment.add_graph(model, input_array)

    def flush(self) -> None:
        """Push pending events to the event file (no-op before the first write)."""
        if self._writer is not None:
            self._hand_over()
            self._writer.flush()

    def continue_run(self, version: int | str | None, step: int) -> None:
        """Continue the checkpoint's version (see `Logger.continue_run`): the next event file starts with
        TensorBoard's ``purge_step = step + 1``, so readers (TensorBoard, ``EventAccumulator``) hide what the
        interrupted run logged after ``step`` and show one curve whose steps never go back."""
        self.finalize("success")  # anything held belongs to the folder it was logged for
        super().continue_run(version, step)
        self._purge_from, self._continued = int(step) + 1, True

    def finalize(self, status: str) -> None:
        """Flush and close the writer and its file. Safe to call repeatedly; later logging reopens."""
        if self._writer is not None:
            atexit.unregister(self._at_exit)
            self._hand_over()
            self._writer.close()  # flushes first
            self._writer = self._at_exit = None


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


def _flush_at_exit(ref: weakref.ref, pid: int) -> None:
    """At interpreter exit: writes what a logger and its writer still hold, if this is the process that opened the
    writer (a forked child holds a copy of the held scalars and queued records but not the thread that writes them:
    flushing would wait forever, and writing them would repeat them)."""
    logger = ref()
    if logger is not None and os.getpid() == pid:
        logger.flush()
