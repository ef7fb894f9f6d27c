"""Accelerate's ``accelerate.tracking`` names (faced by ``stoker.tracking``): `GeneralTracker`, the base of a custom
tracker; the built-in tracker classes under Accelerate's names and constructor arguments; `on_main_process`.

The trackers an Accelerator builds from names are stoker loggers named by their kind (``tracker.name ==
"tensorboard"``, ``tracker.run_name`` the project; see `stoker.loggers.base.Logger.name_by_kind`). The classes here
build the same loggers from Accelerate's arguments, for a script that constructs one itself and passes it in
``log_with``. A `GeneralTracker` subclass goes into ``log_with`` as it is; the Accelerator calls its ``start``,
``store_init_configuration``, ``log`` and ``finish`` (``trackers.py`` says where).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from ...loggers import CometLogger, MLFlowLogger, TensorBoardLogger, WandbLogger, available_loggers
from .other import process_ranks

__all__ = ["CometMLTracker", "GeneralTracker", "MLflowTracker", "TensorBoardTracker", "WandBTracker",
           "get_available_trackers", "on_main_process"]

_REQUIRED = ("name", "requires_logging_directory", "tracker")


class GeneralTracker:
    """The base of a custom tracker: define ``name``, ``requires_logging_directory`` and a ``tracker`` property,
    and override ``store_init_configuration``, ``log`` and ``finish`` (each a no-op here).

    ``main_process_only = True`` (the default): the Accelerator uses the tracker on the main process only. With
    ``False``, ``start``, ``store_init_configuration`` and ``finish`` run on every process (``log`` still only on
    the main one, as ``Accelerator.log`` runs there only).

    Example:
        >>> class PrintTracker(GeneralTracker):
        ...     name = "print"
        ...     requires_logging_directory = False
        ...     tracker = property(lambda self: None)
        ...     def log(self, values, step=None, **kwargs):
        ...         print(step, values)
        >>> PrintTracker().log({"loss": 0.5}, step=1)
        1 {'loss': 0.5}
    """

    main_process_only = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [attr for attr in _REQUIRED if attr not in dir(self)]  # dir: `tracker` may need start() first
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} is missing the tracker attributes {missing}: define them in the class, e.g. "
                "name = 'my_tracker', requires_logging_directory = False and a `tracker` property.")

    def start(self) -> None:
        """Called by ``init_trackers`` before ``store_init_configuration``: start the run here if it needs the
        process group."""

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Record ``values`` (``init_trackers(config=...)``) as the run's hyperparameters."""

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` at ``step``; ``kwargs`` are ``Accelerator.log(log_kwargs={name: {...}})``'s."""

    def finish(self) -> None:
        """Close the run (``end_training()``)."""


class TensorBoardTracker(TensorBoardLogger):
    """``TensorBoardTracker(run_name, logging_dir, **summary_writer_kwargs)``: a `TensorBoardLogger` writing into
    ``{logging_dir}/{run_name}/version_{n}``, named ``"tensorboard"``, without Lightning's ``hp_metric``."""

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any) -> None:
        kwargs.setdefault("default_hp_metric", False)
        super().__init__(logging_dir, name=run_name, **kwargs)
        self.name_by_kind("tensorboard")


class WandBTracker(WandbLogger):
    """``WandBTracker(run_name, **init_kwargs)``: a `WandbLogger` for W&B project ``run_name`` (local files under
    ``./{run_name}/version_{n}``; ``dir=...`` moves them), named ``"wandb"``; ``init_kwargs`` go to ``wandb.init``."""

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__(project=run_name, **kwargs)
        self.name_by_kind("wandb")


class MLflowTracker(MLFlowLogger):
    """``MLflowTracker(experiment_name, logging_dir, run_id, tags, run_name)``: an `MLFlowLogger`, named
    ``"mlflow"``; ``logging_dir`` is the folder of the default local store."""

    def __init__(self, experiment_name: str | None = None, logging_dir: str | os.PathLike | None = None,
                 run_id: str | None = None, tags: Mapping[str, Any] | None = None, run_name: str | None = None,
                 **kwargs: Any) -> None:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name) or "stoker_logs"
        super().__init__(experiment_name, run_name=run_name, tags=tags, run_id=os.environ.get("MLFLOW_RUN_ID", run_id),
                         save_dir=logging_dir if logging_dir is not None else "./mlruns", **kwargs)
        self.name_by_kind("mlflow")


class CometMLTracker(CometLogger):
    """``CometMLTracker(run_name, **kwargs)``: a `CometLogger` for Comet project ``run_name``, named ``"comet_ml"``;
    ``kwargs`` are `CometLogger`'s (``api_key``, ``online``, ``offline_directory``, ...)."""

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__(project=run_name, **kwargs)
        self.name_by_kind("comet_ml")


def get_available_trackers() -> list[str]:
    """The tracker names whose packages are installed (what ``log_with="all"`` builds)."""
    return available_loggers()


def on_main_process(function: Callable) -> Callable:
    """Decorates a tracker's method: with ``self.main_process_only`` true, it runs on the main process only (the
    process index from the process group, else the launcher's ``RANK``) and returns None elsewhere."""

    @functools.wraps(function)
    def on_main(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", False) and process_ranks()[0] != 0:
            return None
        return function(self, *args, **kwargs)

    return on_main
