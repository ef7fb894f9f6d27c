"""Experiment loggers: where `self.log`, `Accelerator.log` and callbacks send numbers.

This package owns the name -> logger registry shared by ``Accelerator(log_with=...)`` and ``Trainer(logger=...)``:
``"tensorboard"``, ``"csv"``, ``"wandb"``, ``"mlflow"`` and ``"all"`` (every registered logger whose package is
installed). `build_loggers` turns such a spec into a plain list of `Logger` objects; `resolve_logger_spec` checks
one without building anything (what the constructors call, so a misspelt or missing tracker fails at once). Loggers
are called on the main process only.

The W&B and MLflow loggers import their packages only when they first write, and their modules are imported only
when named, so ``import stoker.loggers`` stays light.
"""

from __future__ import annotations

import enum
import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stoker.loggers._packages import is_installed, missing_package_error
from stoker.loggers.base import DummyExperiment, Logger, main_process_experiment, share_version
from stoker.loggers.csv import CSVLogger
from stoker.loggers.tensorboard import TensorBoardLogger

__all__ = [
    "CometLogger", "CSVLogger", "DummyExperiment", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger",
    "available_loggers", "build_loggers", "logger_class", "logger_from_name", "logger_name", "main_process_experiment",
    "make_logger", "resolve_logger_spec",
]

_LAZY = {"WandbLogger": "stoker.loggers.wandb", "MLFlowLogger": "stoker.loggers.mlflow",
         "CometLogger": "stoker.loggers.comet"}

# Lightning's module paths under this package (stoker.loggers.csv_logs) are faces kept in stoker/faces/loggers/,
# found through this __path__ entry: the core itself imports nothing from them.
__path__.append(os.path.join(os.path.dirname(os.path.dirname(__file__)), "faces", "loggers"))


@dataclass(frozen=True)
class _Entry:
    module: str  # where the class lives
    cls: str
    package: str  # the import name that must be installed
    install: str  # what to pip install when it is not
    name_arg: str  # the constructor argument that takes the experiment (project) name
    in_all: bool = True  # part of "all" when installed
    dir_arg: str = "save_dir"  # the constructor argument that takes the folder


_REGISTRY: dict[str, _Entry] = {
    "tensorboard": _Entry("stoker.loggers.tensorboard", "TensorBoardLogger", "tensorboard", "tensorboard", "name"),
    "csv": _Entry("stoker.loggers.csv", "CSVLogger", "csv", "", "name"),
    "wandb": _Entry("stoker.loggers.wandb", "WandbLogger", "wandb", "stoker[wandb]", "project"),
    "mlflow": _Entry("stoker.loggers.mlflow", "MLFlowLogger", "mlflow", "stoker[mlflow]", "experiment_name"),
    # Accelerate's name. Not in "all": an online Comet experiment needs an account, and reaches the network at once.
    "comet_ml": _Entry("stoker.loggers.comet", "CometLogger", "comet_ml", "stoker[comet]", "project", in_all=False,
                       dir_arg="offline_directory"),
}

LoggerSpec = str | Logger | None | Sequence[str | Logger]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker.loggers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def available_loggers() -> list[str]:
    """The registered logger names whose packages are installed, Comet's (``"comet_ml"``) aside: what ``"all"`` stands
    for.

    Example:
        >>> "csv" in available_loggers()
        True
    """
    return [key for key, entry in _REGISTRY.items() if entry.in_all and is_installed(entry.package)]


def logger_class(name: str, *, argument: str = "log_with") -> type[Logger]:
    """The logger class registered under ``name`` (any case), after checking that its package is installed.

    Raises:
        ValueError: ``name`` is not a registered logger.
        ModuleNotFoundError: its package is not installed (the message names the extra to install).
    """
    entry = _entry(name, argument)
    if not is_installed(entry.package):
        raise missing_package_error(f"{argument}={name!r}", entry.package, entry.install)
    return getattr(importlib.import_module(entry.module), entry.cls)


def logger_name(logger: Logger) -> str:
    """The registry name of a logger (``"wandb"`` for a `WandbLogger`); custom loggers: the class name, lowercased,
    without a trailing ``"logger"``; a logger named by its kind (`Logger.name_by_kind`): that kind."""
    if getattr(logger, "kind", None):
        return logger.kind
    for key, entry in _REGISTRY.items():
        if type(logger).__name__ == entry.cls and type(logger).__module__ == entry.module:
            return key
    return type(logger).__name__.lower().removesuffix("logger")


def make_logger(key: str, save_dir: str | os.PathLike, experiment: str = "stoker_logs", /, **kwargs: Any) -> Logger:
    """Builds the logger registered under ``key``: ``make_logger("csv", "runs", "mnist")``.

    ``experiment`` goes to the argument that names a run's experiment: ``name`` for TensorBoard and CSV,
    ``project`` for W&B and Comet, ``experiment_name`` for MLflow; ``save_dir`` to ``save_dir`` (Comet's
    ``offline_directory``) unless ``kwargs`` gives it. ``kwargs`` go to the constructor as they are.
    """
    entry = _entry(key, "logger")
    kwargs.setdefault(entry.name_arg, experiment)
    kwargs.setdefault(entry.dir_arg, save_dir)
    return logger_class(key)(**kwargs)


def logger_from_name(spec: str, save_dir: str | os.PathLike, name: str, argument: str = "log_with") -> Logger:
    """The logger registered under ``spec`` (any case), built under ``save_dir`` for experiment ``name``.

    Raises:
        ValueError: ``spec`` is not a registered name (the message lists the names).
        ModuleNotFoundError: its package is not installed.
    """
    entry = _entry(spec, argument)
    return logger_class(spec, argument=argument)(**{entry.dir_arg: save_dir, entry.name_arg: name})


def resolve_logger_spec(spec: LoggerSpec, *, argument: str = "log_with") -> list[str | Logger]:
    """Checks a logger spec and returns its entries: registry names (``"all"`` expanded) and `Logger` instances.

    Nothing is built and no backend is imported; ``argument`` names the parameter in error messages.

    Raises:
        ValueError: an entry is neither a registered name nor a `Logger`, or a name appears twice.
        ModuleNotFoundError: a named logger's package is not installed.
    """
    if spec is None:
        return []
    items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    with_all = any(_as_name(i) == "all" for i in items)
    resolved: list[str | Logger] = []
    for item in items:
        if isinstance(item, Logger):
            resolved.append(item)
            continue
        key = _as_name(item)
        if key == "all":
            resolved.extend(k for k in available_loggers() if k not in resolved)
            continue
        entry = _entry(item, argument)
        if not is_installed(entry.package):
            raise missing_package_error(f"{argument}={item!r}", entry.package, entry.install)
        if key in resolved:
            if with_all:
                continue  # "all" plus a name it already covers
            raise ValueError(f"{argument} lists {key!r} twice; each logger type may appear once.")
        resolved.append(key)
    return resolved


def build_loggers(
    spec: LoggerSpec,
    save_dir: str | os.PathLike,
    name: str = "stoker_logs",
    *,
    init_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    argument: str = "log_with",
) -> list[Logger]:
    """Turn a logger spec into a list of loggers.

    Args:
        spec: ``None`` (no loggers), a registered name (``"tensorboard"``, ``"csv"``, ``"wandb"``, ``"mlflow"``,
            any case) or ``"all"``, a `Logger` instance, or a list/tuple of these.
        save_dir: ``save_dir`` for loggers built from names.
        name: The experiment name for loggers built from names (the TensorBoard/CSV sub-folder, the W&B project,
            the MLflow experiment).
        init_kwargs: Per-logger constructor arguments by registry name, as Accelerate's
            ``init_trackers(init_kwargs={"wandb": {"entity": "me"}})``.
        argument: The parameter name used in error messages (``"log_with"`` or ``"logger"``).

    Returns:
        The loggers, in the order given. Logger instances are returned as-is. The loggers of one call that have
        no version yet (all those built from names, and instances constructed without ``version``) share one
        version: the first number that is free for all of them, so ``["tensorboard", "csv", "wandb"]`` write
        into the same ``version_{n}`` folder and an MLflow run built with them is tagged and named ``version_{n}``.

    Raises:
        ValueError: An entry is not a supported name or a `Logger`, or a name is given twice.
        ModuleNotFoundError: A named logger's package is not installed.

    Example:
        >>> [type(x).__name__ for x in build_loggers(["TensorBoard", "csv"], "runs")]
        ['TensorBoardLogger', 'CSVLogger']
    """
    init_kwargs = {str(k).lower(): dict(v) for k, v in (init_kwargs or {}).items()}
    loggers = [
        item if isinstance(item, Logger) else make_logger(item, save_dir, name, **init_kwargs.get(item, {}))
        for item in resolve_logger_spec(spec, argument=argument)
    ]
    share_version(loggers)  # asks each member's next_free_version: folders, or MLflow's store
    return loggers


def _as_name(item: Any) -> str | None:
    """A registry key from a string or a string-valued enum (Accelerate's ``LoggerType.WANDB``); else None."""
    if isinstance(item, enum.Enum):
        item = item.value
    return item.lower() if isinstance(item, str) else None


def _entry(name: Any, argument: str) -> _Entry:
    key = _as_name(name)
    if key not in _REGISTRY:
        raise ValueError(
            f"{argument}={name!r} is not a supported logger. Expected one of: "
            + ", ".join(repr(n) for n in (*_REGISTRY, "all"))
            + ", a stoker Logger instance, or a list of these."
        )
    return _REGISTRY[key]


if TYPE_CHECKING:  # type checkers and the docs' API reference cannot see PEP 562 lazy names: `X as X` re-exports
    from stoker.loggers.comet import CometLogger as CometLogger
    from stoker.loggers.mlflow import MLFlowLogger as MLFlowLogger
    from stoker.loggers.wandb import WandbLogger as WandbLogger
