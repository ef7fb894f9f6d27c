"""The Accelerator's trackers: ``log_with`` checked at construction, built by ``init_trackers``, found by name.

Trackers are stoker loggers (`stoker.loggers`), built from the registry shared with ``Trainer(logger=...)`` and
named by their kind (``tracker.name == "tensorboard"``, ``tracker.run_name`` the project), beside any custom
`GeneralTracker` given in ``log_with``. Every one answers Accelerate's tracker calls: ``store_init_configuration``,
``log``, ``finish``. They exist on the main process only (custom trackers with ``main_process_only = False``: on
every process); elsewhere ``get_tracker`` answers with a tracker that does nothing, so code written for Accelerate
(``accelerator.get_tracker("wandb").log(...)`` on every rank) runs unchanged.

It owns finding and building trackers; file formats and backends belong to the loggers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .tracking import GeneralTracker

__all__ = ["NullTracker", "build_trackers", "check_log_with", "find_tracker", "tracker_name"]


def check_log_with(log_with: Any) -> Any:
    """Checks ``Accelerator(log_with=...)`` at construction and returns it unchanged.

    Raises:
        ValueError: a name is not a known tracker.
        TypeError: a tracker object does not derive from stoker's `GeneralTracker`.
        ModuleNotFoundError: a named tracker's package is not installed (the message names the extra).
    """
    if log_with is None:
        return None
    from ...loggers import resolve_logger_spec  # only when trackers are asked for: keeps a bare Accelerator light

    for item in _items(log_with):
        tracker_like = hasattr(item, "store_init_configuration") and not hasattr(item, "log_metrics")  # not a Logger
        if tracker_like and not isinstance(item, GeneralTracker):
            raise TypeError(f"log_with holds {type(item).__name__}, a tracker whose class is not stoker's "
                            "GeneralTracker: subclass stoker.tracking.GeneralTracker (was: accelerate.tracking).")
    resolve_logger_spec(_split(log_with)[0], argument="log_with")
    return log_with


def build_trackers(log_with: Any, root: str | os.PathLike, project_name: str, config: Mapping[str, Any] | None,
                   init_kwargs: Mapping[str, Mapping[str, Any]] | None, *, is_main_process: bool) -> list[Any]:
    """The trackers for ``init_trackers``, in ``log_with``'s order, started; ``config`` is logged as their
    hyperparameters. Off the main process: only the custom trackers with ``main_process_only = False``."""
    from ...loggers import build_loggers, logger_name

    specs, custom = _split(log_with)
    loggers: list[Any] = []
    if is_main_process:
        # Accelerate's TensorBoard tracker writes the config without Lightning's placeholder metric (hp_metric = -1);
        # init_kwargs={"tensorboard": {"default_hp_metric": True}} asks for it.
        init_kwargs = {str(k).lower(): dict(v) for k, v in (init_kwargs or {}).items()}
        init_kwargs["tensorboard"] = {"default_hp_metric": False, **init_kwargs.get("tensorboard", {})}
        loggers = build_loggers(specs, root, name=project_name, init_kwargs=init_kwargs)
        built = {id(item) for item in specs}
        for logger in loggers:
            if id(logger) not in built:  # a Logger the script passed in keeps its own name
                logger.name_by_kind(logger_name(logger))
    trackers = _in_given_order(log_with, loggers, custom)
    trackers = [t for t in trackers if is_main_process or not t.main_process_only]
    for tracker in trackers:
        if isinstance(tracker, GeneralTracker):
            tracker.start()
        if config is not None:
            tracker.store_init_configuration(config)
    return trackers


def tracker_name(tracker: Any) -> str:
    """The name ``get_tracker`` and ``log_kwargs`` know a tracker by: a custom tracker's ``name``, a logger's kind."""
    if isinstance(tracker, GeneralTracker):
        return str(tracker.name).lower()
    from ...loggers import logger_name

    return logger_name(tracker)


def find_tracker(trackers: list[Any], name: Any, unwrap: bool, *, is_main_process: bool, initialized: bool) -> Any:
    """What ``Accelerator.get_tracker(name, unwrap)`` returns.

    The tracker registered under ``name`` (``"wandb"``, ``"mlflow"``, ``"tensorboard"``, ``"csv"``, a custom
    tracker's ``name``, or a custom logger's class name without ``"Logger"``); with ``unwrap=True`` its underlying
    object (``logger.experiment``: the W&B run, the ``MlflowClient``, the ``SummaryWriter``; a custom tracker's
    ``tracker``; the logger itself for CSV and loggers without one). On other processes: a `NullTracker`, unless a
    custom tracker with ``main_process_only = False`` has that name.
    """
    key = name.value if hasattr(name, "value") else name  # Accelerate's LoggerType enum
    key = str(key).lower()
    for tracker in trackers:
        if tracker_name(tracker) == key:
            return _unwrapped(tracker, key) if unwrap else tracker
    if not is_main_process:
        return NullTracker()
    if not initialized:
        raise RuntimeError(f"get_tracker({name!r}) was called before init_trackers(): call "
                           "accelerator.init_trackers(project_name) first.")
    names = [tracker_name(t) for t in trackers]
    raise ValueError(f"get_tracker({name!r}): no such tracker. This Accelerator's trackers are {names}; "
                     "add it to Accelerator(log_with=...).")


def _unwrapped(tracker: Any, key: str) -> Any:
    if isinstance(tracker, GeneralTracker):
        return tracker.tracker
    # the CSV logger's experiment is stoker's own file writer, no tracking library's object: not unwrapped
    return getattr(tracker, "experiment", tracker) if key != "csv" else tracker


def _split(log_with: Any) -> tuple[list[Any], list[GeneralTracker]]:
    """``log_with`` as (names and stoker loggers, custom trackers)."""
    items = _items(log_with)
    return ([i for i in items if not isinstance(i, GeneralTracker)],
            [i for i in items if isinstance(i, GeneralTracker)])


def _in_given_order(log_with: Any, loggers: list[Any], custom: list[GeneralTracker]) -> list[Any]:
    """The built loggers and the custom trackers in ``log_with``'s order: a custom tracker where it was given, each
    named logger at its name's place (``"all"``: the loggers not named elsewhere, in the registry's order)."""
    from ...loggers import logger_name

    if not custom:
        return loggers
    placed: list[Any] = []
    items = _items(log_with)
    for item in items:
        if isinstance(item, GeneralTracker):
            placed.append(item)
            continue
        key = getattr(item, "value", item)
        found = [lg for lg in loggers if lg is item or (isinstance(key, str) and logger_name(lg) == key.lower())]
        placed.extend(lg for lg in found if not any(lg is p for p in placed))
    placed.extend(lg for lg in loggers if not any(lg is p for p in placed))  # "all"'s, after the named ones
    return placed


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


def _items(log_with: Any) -> list[Any]:
    if log_with is None:
        return []
    return list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
