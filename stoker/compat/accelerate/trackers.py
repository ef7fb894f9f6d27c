"""The Accelerator's trackers: ``log_with`` checked at construction, built by ``init_trackers``, found by name.

Trackers are stoker loggers (`stoker.loggers`), built from the registry shared with ``Trainer(logger=...)``. They
exist on the main process only; elsewhere ``get_tracker`` answers with a tracker that does nothing, so code written
for Accelerate (``accelerator.get_tracker("wandb").log(...)`` on every rank) runs unchanged.

It owns finding and building trackers; file formats and backends belong to the loggers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["NullTracker", "build_trackers", "check_log_with", "find_tracker"]


def check_log_with(log_with: Any) -> Any:
    """Checks ``Accelerator(log_with=...)`` at construction and returns it unchanged.

    Raises:
        ValueError: a name is not a known tracker.
        ModuleNotFoundError: a named tracker's package is not installed (the message names the extra).
    """
    if log_with is None:
        return None
    from ...loggers import resolve_logger_spec  # only when trackers are asked for: keeps a bare Accelerator light

    resolve_logger_spec(log_with, argument="log_with")
    return log_with


def build_trackers(log_with: Any, root: str | os.PathLike, project_name: str, config: Mapping[str, Any] | None,
                   init_kwargs: Mapping[str, Mapping[str, Any]] | None) -> list[Any]:
    """The loggers for ``init_trackers``; ``config`` is logged as their hyperparameters."""
    from ...loggers import build_loggers

    # Accelerate's TensorBoard tracker writes the config without Lightning's placeholder metric (hp_metric = -1);
    # init_kwargs={"tensorboard": {"default_hp_metric": True}} asks for it.
    init_kwargs = {str(k).lower(): dict(v) for k, v in (init_kwargs or {}).items()}
    init_kwargs["tensorboard"] = {"default_hp_metric": False, **init_kwargs.get("tensorboard", {})}
    trackers = build_loggers(log_with, root, name=project_name, init_kwargs=init_kwargs)
    if config is not None:
        for tracker in trackers:
            tracker.log_hyperparams(config)
    return trackers


def find_tracker(trackers: list[Any], name: Any, unwrap: bool, *, is_main_process: bool, initialized: bool) -> Any:
    """What ``Accelerator.get_tracker(name, unwrap)`` returns.

    The logger registered under ``name`` (``"wandb"``, ``"mlflow"``, ``"tensorboard"``, ``"csv"``, or a custom
    logger's class name without ``"Logger"``); with ``unwrap=True`` its underlying object (``logger.experiment``:
    the W&B run, the ``MlflowClient``, the ``SummaryWriter``; the logger itself for CSV and loggers without one).
    On other processes: a `NullTracker`.
    """
    from ...loggers import logger_name

    if not is_main_process:
        return NullTracker()
    key = name.value if hasattr(name, "value") else name  # Accelerate's LoggerType enum
    key = str(key).lower()
    for tracker in trackers:
        if logger_name(tracker) == key:
            # the CSV logger's experiment is stoker's own file writer, no tracking library's object: not unwrapped
            return getattr(tracker, "experiment", tracker) if unwrap and key != "csv" else tracker
    if not initialized:
        raise RuntimeError(f"get_tracker({name!r}) was called before init_trackers(): call "
                           "accelerator.init_trackers(project_name) first.")
    names = [logger_name(t) for t in trackers]
    raise ValueError(f"get_tracker({name!r}): no such tracker. This Accelerator's trackers are {names}; "
                     "add it to Accelerator(log_with=...).")


class NullTracker:
    """A tracker that does nothing: what ``get_tracker`` returns on processes other than the main one.

    Every attribute is a function that accepts anything and returns None; ``experiment`` and ``tracker`` are the
    null tracker itself, so ``get_tracker(name, unwrap=True).log(...)`` is a no-op too.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("experiment", "tracker", "run"):
            return self
        return _no_op

    def __repr__(self) -> str:
        return "NullTracker()"


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None
