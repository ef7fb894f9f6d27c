"""The `Logger` interface shared by every stoker logger.

This module owns the parts all loggers agree on: where a run's files live (`{save_dir}/{name}/version_{n}`), how the
next free version is found, and the names a logger answers to as one of an Accelerator's trackers (Accelerate's
``name``, ``run_name``, ``store_init_configuration``, ``finish``). How values are normalised is `values.py`'s; file
formats are the TensorBoard and CSV loggers'.

Loggers never look at process ranks. In a multi-process run the caller (the Trainer or `Accelerator.log`) calls them
only on the main process, so a logger writes files without coordinating; the Trainer also tells the loggers of the
other processes that they are not on the main one (`Logger.on_main_process`), so that a script's own
``self.logger.experiment.add_image(...)`` in a step gets a `DummyExperiment` there (Lightning's rule) instead of
starting a second writer or run.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from stoker.loggers.folders import blocking_file, attribute_type_error, free_version_under
from stoker.loggers.hparams_yaml import HPARAMS_YAML, write_hparams_yaml  # noqa: F401 - re-exported
from stoker.loggers.values import (  # noqa: F401 - re-exported: the logger modules import them from here
    Scalar, flatten_params, jsonable_params, numbers_only, params_to_dict, prefixed, to_scalars)

__all__ = ["DummyExperiment", "HPARAMS_YAML", "Logger", "jsonable_params", "main_process_experiment",
           "write_hparams_yaml"]

T = TypeVar("T")


class DummyExperiment:
    """Answers every method call with None and forgets item assignments, so code written for a backend's experiment
    object runs unchanged where nothing may be written (another process than the main one; ``fast_dev_run``)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def __getitem__(self, index: Any) -> DummyExperiment:
        return self  # Lightning's experiment may be indexed as a list (one per logger)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Accepted and forgotten (``run["params"] = ...`` in Neptune-style code)."""


def main_process_experiment(getter: Callable[[Any], T]) -> Callable[[Any], T | DummyExperiment]:
    """Wraps a logger's ``experiment`` getter: a `DummyExperiment` where the logger is not on the run's main process
    (:attr:`Logger.on_main_process`), so nothing starts or writes there (Lightning's ``rank_zero_experiment``)."""
    @functools.wraps(getter)
    def experiment(self: Any) -> T | DummyExperiment:
        return getter(self) if self.on_main_process else DummyExperiment()

    return experiment


class Logger:
    """Base class for experiment loggers; every method has a no-op default.

    A logger writes one run into ``log_dir``, which is ``{save_dir}/{name}/version_{n}``. With ``version=None`` the
    number is the next free one under ``{save_dir}/{name}`` and is chosen the first time it is needed (not in
    ``__init__``), so constructing a logger touches no files. A string version is used as the folder name as-is.

    Loggers do not check process ranks: the caller must call them on the main process only. Subclasses usually
    override just ``log_metrics``; override ``log_hyperparams``, ``flush`` and ``finalize`` when the backend needs
    them.

    Args:
        save_dir: Root folder for all runs. None (the default of this base class, which Lightning-style custom
            loggers get from ``super().__init__()``): the logger keeps no files, and its run's checkpoints go to
            ``{default_root_dir}/{name}/version_{n}/checkpoints``, numbered there (``stoker.loggers.layout``).
        name: Experiment name, a sub-folder of ``save_dir``. ``""`` or ``None`` puts the version folders directly in
            ``save_dir``.
        version: ``None`` (next free ``version_{n}``), an ``int`` n (folder ``version_{n}``) or a ``str`` (the
            folder name itself).

    Example:
        >>> class PrintLogger(Logger):
        ...     def log_metrics(self, metrics, step=None):
        ...         print(step, dict(metrics))
        >>> PrintLogger().log_metrics({"loss": 0.5}, step=3)
        3 {'loss': 0.5}
    """

    # Class-level defaults keep the properties working for subclasses whose
    # own __init__ forgets to call super().__init__().
    _save_dir: str | None = None
    writes_files = False  # a logger that writes files of its own needs a save_dir (None is a TypeError there)
    uploads_checkpoints = False  # True: ModelCheckpoint saves in the foreground, so after_save_checkpoint can read
    on_main_process = True  # the Trainer sets False on a multi-process run's other processes (the module docstring)
    # Lightning's contract: the Trainer calls save() after each log_metrics, so a logger that holds values and
    # writes them in save() writes as it goes. Loggers that write on a rule of their own (CSV, TensorBoard) say False.
    save_after_log = True
    _name: str = "stoker_logs"
    _version: int | str | None = None
    _version_given: bool = False
    # Loggers of one run share one version number (see `share_version`): they
    # ask a shared `VersionGroup` instead of scanning their own folder (which
    # would see a sibling's new folder and pick the next number).
    _version_group: VersionGroup | None = None
    _last_step: int = -1
    _kind: str | None = None  # set by `name_by_kind`: what ``name`` answers instead of the experiment name
    # Accelerate's tracker attributes: the Accelerator calls loggers on the main process only; only the loggers that
    # keep their files under the logging directory (TensorBoard, CSV) say they need one.
    main_process_only = True
    requires_logging_directory = False
    # True: log_metrics takes numbers only and checks every value before writing; Accelerate's ``log`` then leaves
    # the others out (`log`)
    keeps_numbers_only = False

    def __init__(
        self,
        save_dir: str | os.PathLike | None = None,
        name: str | None = "stoker_logs",
        version: int | str | None = None,
    ) -> None:
        # "~" and "$VAR" expanded, as a shell would (Lightning's file loggers do the same)
        # None: a logger that keeps no files of its own (a Lightning-style custom logger calling super().__init__());
        # its run's checkpoints go under the Trainer's default_root_dir, as Lightning places them.
        self._save_dir = None if save_dir is None and not self.writes_files else os.path.expandvars(
            os.path.expanduser(_path_text(save_dir, type(self).__name__)))
        self._name = name or ""
        self._version = None if version is None else _checked_version(version)
        self._version_given = version is not None

    @property
    def name(self) -> str:
        """The experiment name (sub-folder of ``save_dir``); for a logger named by its kind (`name_by_kind`: the
        trackers an Accelerator builds), the kind, ``"tensorboard"``, as Accelerate's trackers answer."""
        return self._kind if self._kind is not None else self._name

    @property
    def run_name(self) -> str:
        """Accelerate's ``tracker.run_name``: the experiment name (the ``project_name`` given to ``init_trackers``),
        whatever ``name`` answers."""
        return self._folder_name()

    def _folder_name(self) -> str:
        """The sub-folder of ``save_dir``: the experiment name, also for a logger named by its kind."""
        return self._name if self._kind is not None else self.name  # the property: a subclass may override name

    def name_by_kind(self, kind: str) -> None:
        """Answer ``name`` with ``kind`` (``"tensorboard"``, ``"csv"``, ``"wandb"``, ``"mlflow"``) instead of the
        experiment name, which stays ``run_name`` and the folder. The Accelerator calls it on the trackers it builds,
        so that Accelerate's ``if tracker.name == "tensorboard":`` finds them; a Trainer's loggers keep Lightning's
        meaning of ``name``."""
        self._kind = str(kind)

    @property
    def kind(self) -> str | None:
        """The kind given to `name_by_kind` (None: ``name`` is the experiment name)."""
        return self._kind

    @property
    def save_dir(self) -> str | None:
        """The root folder given at construction (None: none given, see ``root_dir``)."""
        return self._save_dir

    @property
    def root_dir(self) -> str | None:
        """``{save_dir}/{name}``: the folder that holds the version folders; None for a logger that keeps no local
        files (a subclass whose ``save_dir`` is None: its run's checkpoints go under the Trainer's
        ``default_root_dir``, see ``stoker.loggers.layout``)."""
        save_dir, name = self.save_dir, self._folder_name()  # a subclass may override name or save_dir
        if save_dir is None:
            return None
        return os.path.join(save_dir, name) if name else save_dir

    @property
    def version(self) -> int | str:
        """The run's version; resolved on first access when constructed with ``None``."""
        if self._version is None:
            group = self._version_group
            self._version = group.version if group is not None else self.next_free_version()
        return self._version

    @version.setter
    def version(self, version: int | str) -> None:
        """Fixes the version before anything is written (every process of a run takes the main process's)."""
        self._version = _checked_version(version)

    @property
    def version_chosen(self) -> bool:
        """Whether the version is known already (given, set, or resolved, or a subclass answers ``version`` itself, as
        Lightning's custom loggers do), so no folder will be scanned for it and nothing sets it."""
        return self._version is not None or type(self).version is not Logger.version

    @property
    def version_given(self) -> bool:
        """Whether the version was passed to the constructor (a resumed run then keeps it, see `continue_run`)."""
        return self._version_given

    def continue_run(self, version: int | str | None, step: int) -> None:
        """Continue the run a checkpoint was written under: its ``version``, and its series after step ``step``.

        The Trainer calls it when ``fit(ckpt_path=...)`` resumes, on every process, before anything is written, so
        the logs (and the default checkpoint folder) stay in the checkpoint's version. A version passed to the
        constructor wins; ``None`` (none recorded) keeps this logger's. What the interrupted run logged after
        ``step`` is trained again, so file loggers drop it (TensorBoard: ``purge_step``; CSV: its rows). The base
        class takes the version and continues ``step=None`` numbering after ``step``.
        """
        if version is not None and not self._version_given:
            self._version = _checked_version(version)
        self._last_step = int(step)

    def next_free_version(self) -> int:
        """The number a new run would take: one past the largest ``version_{n}`` folder under ``root_dir``.

        Loggers that keep runs elsewhere (MLflow's store) override it; a `VersionGroup` takes the largest answer.
        """
        root = self.root_dir
        return 0 if root is None else free_version_under(root)  # no folder of its own: the layout numbers it

    def join_version_group(self, group: VersionGroup) -> None:
        """Take the version that ``group`` chooses (on first need) instead of scanning this logger's own folder."""
        self._version_group = group

    @property
    def version_dir(self) -> str | None:
        """``{save_dir}/{name}/version_{n}`` (a str version: the folder named so): the run's folder, which also
        holds its default ``checkpoints`` folder. ``log_dir`` is this folder unless a logger adds a sub-folder.
        None when ``root_dir`` is."""
        root = self.root_dir
        return None if root is None else os.path.join(root, self.version_folder)

    @property
    def version_folder(self) -> str:
        """The version's folder name: ``version_{n}``, or a str version as it is."""
        version = self.version
        if version is not None and (isinstance(version, bool) or not isinstance(version, (int, str))):
            raise attribute_type_error(self, "version", version, "an int or a str")  # None: "version_None", as Lightning
        return version if isinstance(version, str) else f"version_{version}"

    @property
    def log_dir(self) -> str | None:
        """The folder this run writes into (None when the logger keeps no local files). Not created until the first
        write."""
        return self.version_dir

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Record scalar metrics at ``step``. The default does nothing.

        Args:
            metrics: Metric name to value; scalar tensors are allowed and
                converted with ``.item()`` here, at log time.
            step: The x-axis value (usually the optimizer step).
        """

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """:meth:`log_metrics` under the name an Accelerate tracker gives it (``accelerator.get_tracker(...)`` returns
        these loggers); ``kwargs`` (a tracker's own options, ``log_kwargs`` of ``Accelerator.log``) are not used
        here: the TensorBoard and W&B loggers pass them on to their backend. A logger that ``keeps_numbers_only``
        (CSV, MLflow) leaves text and media out, with a warning that names them."""
        if not self.keeps_numbers_only:
            self.log_metrics(values, step=step)
            return
        try:
            self.log_metrics(values, step=step)  # such a logger converts every value before it writes anything
        except TypeError:
            self.log_metrics(numbers_only(values, type(self).__name__), step=step)

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """:meth:`log_hyperparams` under Accelerate's tracker name for it (``init_trackers(config=...)``)."""
        self.log_hyperparams(values)

    def finish(self) -> None:
        """``finalize("success")`` under Accelerate's tracker name for it (``end_training()``)."""
        self.finalize("success")

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Record the run's hyperparameters. The default does nothing."""

    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """Record the model's graph; the Trainer calls it when ``fit`` starts. The default does nothing."""

    def save(self) -> None:
        """Write what describes the run beside its logs, and what the logger holds; the Trainer calls it when ``fit``
        starts, after :meth:`log_hyperparams` and :meth:`log_graph`, after each :meth:`log_metrics` (unless
        ``save_after_log`` is False) and from the default :meth:`finalize`. The default does nothing."""

    def flush(self) -> None:
        """Write buffered data to disk. The default does nothing."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called by ``ModelCheckpoint`` after each save, on the main process (as Lightning's; its
        ``best_model_path`` and ``last_model_path`` name the folders). The folders are in place when
        :attr:`uploads_checkpoints` is True; otherwise a commit may still finish in the background. The default
        does nothing."""

    def finalize(self, status: str) -> None:
        """Finish the run; ``status`` is ``"success"``, ``"failed"`` or ``"interrupted"``.

        The default saves and flushes (Lightning's saves). Implementations must be safe to call twice.
        """
        self.save()
        self.flush()

    def _resolve_step(self, step: int | None) -> int:
        """``step``, or one past the largest step logged so far when it is ``None``."""
        step = self._last_step + 1 if step is None else int(step)
        self._last_step = max(self._last_step, step)
        return step

    def __repr__(self) -> str:
        return f"{type(self).__name__}(save_dir={self._save_dir!r}, name={self._name!r}, version={self._version!r})"


class VersionGroup:
    """One ``version_{n}`` number for several loggers, chosen once, on first need.

    The number is the smallest that is free under *every* member's ``root_dir``
    (one more than the largest ``version_{n}`` in any of them), so loggers with
    different ``save_dir`` or ``name`` still share it without reusing a folder.
    """

    def __init__(self, loggers: list[Logger]) -> None:
        self.loggers = loggers
        self._version: int | None = None

    @property
    def version(self) -> int:
        if self._version is None:
            self._version = max(lg.next_free_version() for lg in self.loggers)
        return self._version


def share_version(loggers: list[Logger]) -> None:
    """Make the loggers of one run that have no version yet share one ``version_{n}``.

    Loggers constructed with an explicit ``version`` (or whose version was already
    resolved) keep theirs. Resolution stays lazy: no folder is scanned until a
    logger first needs its ``log_dir``.
    """
    pending = [lg for lg in loggers if not lg.version_chosen]
    if len(pending) > 1:
        group = VersionGroup(pending)
        for logger in pending:
            logger.join_version_group(group)


def _checked_version(version: Any) -> int | str:
    if isinstance(version, bool) or not isinstance(version, (int, str)):
        raise TypeError(
            f"version={version!r} is not a valid logger version. Expected None (next free), "
            "an int n (folder 'version_{n}') or a str (the folder name)."
        )
    if isinstance(version, int) and version < 0:
        raise ValueError(f"version={version!r} must be >= 0.")
    return version


def _path_text(save_dir: Any, owner: str) -> str:
    """``save_dir`` as a string; a clear ``TypeError`` when it is not a path."""
    if isinstance(save_dir, bytes):
        return os.fsdecode(save_dir)
    try:
        return os.fspath(save_dir)
    except TypeError:
        raise TypeError(
            f"{owner}(save_dir={save_dir!r}): save_dir must be a folder path (a str or os.PathLike), "
            f"not {type(save_dir).__name__}. Pass e.g. save_dir='runs'."
        ) from None


def check_log_folder(logger: Logger) -> None:
    """Fail at construction when the logger's folder cannot be created because a file is in the way.

    Logs are written much later; an error then (after an epoch of training) would
    lose the run, so a logger that writes files checks its folder up front:
    ``save_dir``, ``{save_dir}/{name}`` and every folder above them must be folders
    or not exist yet.
    """
    path = blocking_file(logger.root_dir)
    if path is not None:
        what = "save_dir" if path == os.path.abspath(logger.save_dir) else "the path"
        raise ValueError(
            f"{type(logger).__name__}(save_dir={logger.save_dir!r}, name={logger.name!r}): {what} {path!r} is a "
            "file, so the log folder {save_dir}/{name}/version_{n} cannot be created under it. Pass a folder path "
            "for save_dir (it is created if missing)."
        )
