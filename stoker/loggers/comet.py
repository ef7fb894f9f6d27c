"""`CometLogger`: metrics and hyperparameters in a Comet experiment (extra ``stoker[comet]``), with Lightning's
arguments.

This module owns one Comet experiment per logger. The experiment starts on the first write (or the first access to
``experiment``) through ``comet_ml.start``; constructing the logger imports ``comet_ml`` once to check the
experiment settings (``comet_ml.ExperimentConfig``), with Comet's automatic logging of torch off unless the
environment says otherwise (``COMET_DISABLE_AUTO_LOGGING``): the Trainer reports what it logs itself.

Offline (``online=False``) the experiment is kept on this machine as a zip archive in ``offline_directory``, which
``comet upload <archive>`` sends later; the archive is written when the experiment ends (``logger.experiment.end()``,
or at the interpreter's exit).
"""

from __future__ import annotations

import argparse
import copy
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers._packages import is_installed, missing_package_error
from stoker.loggers.base import Logger, main_process_experiment
from stoker.loggers.values import params_to_dict, to_scalars

if TYPE_CHECKING:
    from comet_ml import CometExperiment

__all__ = ["CometLogger"]

FRAMEWORK = "stoker"  # what the experiment's "Created from" records
_MODES = ("get_or_create", "get", "create")
# Lightning's earlier argument names, and the current ones they stand for
_OLD_NAMES = {"experiment_name": "name", "project_name": "project", "save_dir": "offline_directory"}


class CometLogger(Logger):
    """Logs to a Comet experiment; Lightning's ``CometLogger`` arguments.

    ``log_metrics`` sends the numbers (one ``.item()`` per tensor) with their step, and the ``epoch`` entry the
    Trainer adds as the experiment's epoch; ``log_hyperparams`` sends the parameters (Comet flattens nested ones).
    ``finalize`` flushes without ending the experiment, as Lightning's does, so a script can keep logging to
    ``logger.experiment`` after ``fit``; the experiment ends with ``logger.experiment.end()`` or at exit.

    The run's checkpoints (``ModelCheckpoint`` without a ``dirpath``) go to ``{root}/{project}/{version}/checkpoints``,
    ``root`` being ``offline_directory`` offline and the Trainer's ``default_root_dir`` online; ``version`` is the
    experiment key.

    Args:
        api_key: Comet API key (online; ``comet login`` or ``COMET_API_KEY`` can give it instead).
        workspace: Comet workspace (default: the account's).
        project: Comet project (also the run folder's name; ``"stoker_logs"`` when None).
        experiment_key: The experiment's key, 32 to 50 letters and digits: logs into that experiment where ``mode``
            allows. A new key is made when None.
        mode: ``"get_or_create"`` (Comet's default), ``"get"`` (an existing experiment: needs ``experiment_key``) or
            ``"create"``.
        online: False keeps the experiment offline, in ``offline_directory``; None: Comet's configuration decides.
        prefix: Put before every metric name by Comet (``"{prefix}_{name}"``).
        **kwargs: ``comet_ml.ExperimentConfig`` settings: ``name``, ``offline_directory``, ``tags``, ``log_code``,
            ``disabled``... (or ``experiment_config=`` the object itself, as ``comet_ml.start`` takes it; keywords
            beside it change a copy).
            Lightning's earlier names are taken too: ``experiment_name`` (``name``),
            ``project_name`` (``project``), ``save_dir`` (``offline_directory``), ``offline`` (``not online``).

    Raises:
        ModuleNotFoundError: ``comet_ml`` is not installed (install ``stoker[comet]``).

    Example:
        >>> logger = CometLogger(project="mnist", online=False, offline_directory="runs/comet")  # doctest: +SKIP
        >>> Trainer(logger=logger).fit(module, loader)  # doctest: +SKIP
        >>> logger.experiment.end()  # doctest: +SKIP  (the offline archive is written now)
    """

    def __init__(self, *, api_key: str | None = None, workspace: str | None = None, project: str | None = None,
                 experiment_key: str | None = None, mode: str | None = None, online: bool | None = None,
                 prefix: str | None = None, **kwargs: Any) -> None:
        if not is_installed("comet_ml"):
            raise missing_package_error("CometLogger", "comet_ml", "stoker[comet]")
        project, online, kwargs = _current_names(project, online, kwargs)
        if mode not in (None, *_MODES):
            raise ValueError(f"CometLogger(mode={mode!r}): expected one of {list(_MODES)} or None.")
        if mode == "get" and experiment_key is None:
            raise ValueError("CometLogger(mode='get') continues an existing experiment: pass its experiment_key.")
        if online is not None and not isinstance(online, bool):
            raise TypeError(f"CometLogger(online={online!r}) must be True, False or None.")
        if experiment_key is not None and not (isinstance(experiment_key, str) and experiment_key.isalnum()
                                               and 32 <= len(experiment_key) <= 50):
            raise ValueError(f"CometLogger(experiment_key={experiment_key!r}): Comet needs 32 to 50 letters and "
                             "digits (or None for a new key).")
        os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")  # before comet_ml's first import: see module doc
        import comet_ml

        config = kwargs.pop("experiment_config", None)  # Accelerate's init_kwargs pass comet_ml.start's own object
        if config is None:
            self._config = comet_ml.ExperimentConfig(**kwargs)  # an unknown setting fails here, not at the first log
        else:  # keywords beside it change a copy of it
            self._config = copy.copy(config)
            for key, value in kwargs.items():
                if not hasattr(self._config, key):
                    raise TypeError(f"CometLogger({key}=...) is not a comet_ml.ExperimentConfig setting.")
                setattr(self._config, key, value)
        super().__init__(None, project or "stoker_logs", experiment_key or uuid.uuid4().hex)
        self._api_key, self._workspace, self._project = api_key, workspace, project
        self._mode, self._online, self._prefix = mode, online, prefix
        self._experiment: CometExperiment | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A live experiment holds threads and a connection; a pickled copy (sent to spawned workers) starts its own.
        return {**self.__dict__, "_experiment": None}

    @property
    def save_dir(self) -> str | None:
        """The offline experiment's folder (``offline_directory``) when offline, else None (Lightning's)."""
        folder = self._config.offline_directory
        return os.fspath(folder) if folder is not None and self._online is False else None

    @property
    @main_process_experiment
    def experiment(self) -> CometExperiment:
        """The Comet experiment, started on first access (``logger.experiment.log_image(...)`` and the rest of
        Comet's API for what the logger does not wrap)."""
        if self._experiment is None:
            import comet_ml

            self._experiment = comet_ml.start(
                api_key=self._api_key, workspace=self._workspace, project=self._project, experiment_key=self.version,
                mode=self._mode, online=self._online, experiment_config=self._config)
            self._experiment.log_other("Created from", FRAMEWORK)
        return self._experiment

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """The numbers in ``metrics`` at ``step``; an ``epoch`` entry is the experiment's epoch, not a metric."""
        values = to_scalars(metrics)
        epoch = values.pop("epoch", None)
        if values:
            self.experiment.log_metrics(values, step=self._resolve_step(step), epoch=epoch, prefix=self._prefix)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """The parameters, nested mappings included (Comet shows them flattened)."""
        self.experiment.log_parameters(params_to_dict(params))

    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """The model's structure, as Comet's ``set_model_graph`` shows it (``input_array`` is not needed)."""
        self.experiment.set_model_graph(model)

    def finalize(self, status: str) -> None:
        """Flushes what was logged; the experiment stays open (see the class docstring). Safe to call twice."""
        if self._experiment is not None:
            self._experiment.flush()

    # Accelerate's CometMLTracker (``log_with="comet_ml"``): the experiment as ``tracker``/``writer``, ``log`` of
    # numbers, text and dicts, and ``end_training()`` ending the experiment (offline: writing its archive).
    tracker = writer = experiment

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log``: numbers (and one-element tensors) as metrics at ``step``, text as Comet's
        "other" values, a dict as metrics of its own; ``kwargs`` go to Comet's ``log_metrics``."""
        at, numbers = self._resolve_step(step), {}
        for key, value in values.items():
            if isinstance(value, str):
                self.experiment.log_other(key, value)
            elif isinstance(value, Mapping):
                self.experiment.log_metrics(to_scalars(value), step=at, **kwargs)
            else:
                numbers[key] = value
        if numbers:
            self.experiment.log_metrics(to_scalars(numbers), step=at, **kwargs)

    def finish(self) -> None:
        """Accelerate's ``end_training()``: ends the experiment (Comet writes the offline archive then)."""
        if self._experiment is not None:
            self._experiment.end()
            self._experiment = None


def _current_names(project: str | None, online: bool | None, kwargs: dict[str, Any]
                   ) -> tuple[str | None, bool | None, dict[str, Any]]:
    """Lightning's earlier argument names as the current ones; both given is an error."""
    kwargs = dict(kwargs)
    for old, new in _OLD_NAMES.items():
        if old in kwargs:
            given = project if new == "project" else kwargs.get(new)
            if given is not None:
                raise TypeError(f"CometLogger: pass {new}= only ({old}= is its earlier name).")
            value = kwargs.pop(old)
            if new == "project":
                project = value
            else:
                kwargs[new] = os.fspath(value) if new == "offline_directory" else value
    if "offline" in kwargs:
        if online is not None:
            raise TypeError("CometLogger: pass online= only (offline= is its earlier, inverted, name).")
        online = not kwargs.pop("offline")
    return project, online, kwargs
