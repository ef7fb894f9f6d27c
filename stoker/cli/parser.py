"""``LightningArgumentParser``: a jsonargparse parser that reads a Trainer's, a module's, a data module's, a callback's,
an optimizer's or an LR scheduler's ``__init__`` signature into a group of arguments (``--trainer.max_epochs``).

Owns the argument groups and the record of which groups hold optimizers and schedulers (what the CLI reads to build
``configure_optimizers``); it builds nothing. jsonargparse is an optional extra (``pip install 'stoker[cli]'``):
this module is the one place that imports it, and says so when it is missing. We use jsonargparse rather than our
own parser because it already reads signatures, docstrings, class paths and config files (YAML, JSON, jsonnet).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.optim import Optimizer

try:
    from jsonargparse import (
        ActionConfigFile,
        ArgumentParser,
        Namespace,
        class_from_function,
        register_unresolvable_import_paths,
    )
except ModuleNotFoundError as error:  # an optional extra: say which, not just "No module named jsonargparse"
    raise ModuleNotFoundError(
        f"stoker.cli.LightningCLI needs jsonargparse, which is not installed ({error}). Install the extra: "
        "pip install 'stoker[cli]' (or pip install 'jsonargparse[signatures]>=4.27').", name=error.name) from error

from ..callbacks import Callback
from ..trainer import Trainer as CoreTrainer
from ..trainer import TrainingModule
from ..trainer.datamodule import DataModule
from .optimizers import LRSchedulerTypeTuple, class_path_dict

# torch's objects whose __module__ is not an import path (torch.nn.Softmax says "torch.nn.modules.activation"):
# without this, jsonargparse writes and reads them by the path they are imported from (jsonargparse's own setting).
register_unresolvable_import_paths(torch)


def _import_short_names() -> None:
    """Imports the callbacks and loggers that ``stoker.callbacks`` / ``stoker.loggers`` export lazily: jsonargparse
    resolves a short name (``--trainer.callbacks+=ModelPruning``) only among subclasses already imported, which
    Lightning's eager imports give it. A class whose optional package is missing is left out."""
    from .. import callbacks, loggers

    for package in (callbacks, loggers):
        for name in package.__all__:
            try:
                getattr(package, name)
            except ImportError:
                pass


_import_short_names()

__all__ = ["KEEP_NONE", "ActionConfigFile", "LightningArgumentParser", "Namespace", "class_from_function",
           "instantiate"]

# jsonargparse 4.49 renamed `skip_none` to `skip_unset` and `instantiate_classes` to `instantiate` (the old names
# warn): the one spelling of each that the installed version takes.
_RENAMED = hasattr(ArgumentParser, "instantiate")
KEEP_NONE: dict[str, bool] = {"skip_unset": False} if _RENAMED else {"skip_none": False}


def instantiate(parser: Any, config: Any) -> Any:
    """``config`` with its classes built (jsonargparse's ``instantiate``, ``instantiate_classes`` before 4.49)."""
    return parser.instantiate(config) if _RENAMED else parser.instantiate_classes(config)

# The classes whose signatures become a group of arguments (the core Trainer: stoker.Trainer is one of them).
_CONFIGURABLE = (CoreTrainer, TrainingModule, DataModule, Callback)
# The core Trainer's `options` (a RunOptions) is not a Lightning argument: stoker.Trainer builds it from them.
_TRAINER_SKIP = {"options"}


def _as_class(target: Any) -> Any:
    """A function that returns one of the configurable classes, as a class jsonargparse can read (its signature)."""
    if callable(target) and not isinstance(target, type):
        return class_from_function(target)
    return target


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's ``ArgumentParser`` with groups read from stoker's classes (Lightning's
    ``LightningArgumentParser``, the same methods).

    Example:
        >>> parser = LightningArgumentParser()
        >>> parser.add_lightning_class_args(Trainer, "trainer")  # doctest: +SKIP
        >>> parser.parse_args(["--trainer.max_epochs=2"]).trainer.max_epochs  # doctest: +SKIP
        2
    """

    def __init__(self, *args: Any, description: str = "stoker Trainer command line tool", env_prefix: str = "PL",
                 default_env: bool = False, **kwargs: Any) -> None:
        """Args as jsonargparse's ``ArgumentParser``; environment variables (``PL_FIT__TRAINER__MAX_EPOCHS``) are
        read only with ``default_env=True``."""
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []
        # nested key -> (the class or tuple of classes allowed, link_to): which groups are optimizers / schedulers
        self.optimizer_groups: dict[str, tuple[Any, str]] = {}
        self.lr_scheduler_groups: dict[str, tuple[Any, str]] = {}

    def add_lightning_class_args(self, lightning_class: Any, nested_key: str | None, subclass_mode: bool = False,
                                 required: bool = True) -> list[str]:
        """Adds the ``__init__`` arguments of a Trainer, TrainingModule, DataModule or Callback (or of a function
        that returns one) under ``nested_key``; ``subclass_mode`` takes any subclass by class path
        (``--model=pkg.Net --model.init_args.width=8``). Returns the names of the arguments added."""
        cls = _as_class(lightning_class)
        if not (isinstance(cls, type) and issubclass(cls, _CONFIGURABLE)):
            raise TypeError(f"Cannot add arguments from {lightning_class!r}: expected a Trainer, TrainingModule, "
                            "DataModule or Callback class, or a function that returns one (annotated so).")
        if issubclass(cls, Callback) and nested_key is not None:
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(cls, nested_key, fail_untyped=False, required=required)
        is_trainer = issubclass(cls, CoreTrainer)
        return self.add_class_arguments(cls, nested_key, fail_untyped=False, instantiate=not is_trainer,
                                        sub_configs=True, skip=_TRAINER_SKIP if is_trainer else None)

    def add_optimizer_args(self, optimizer_class: type | tuple[type, ...] = (Optimizer,),
                           nested_key: str = "optimizer", link_to: str = "AUTOMATIC") -> None:
        """Adds an optimizer's arguments (all but ``params``) under ``nested_key``. A tuple of classes takes any
        subclass by class path (``--optimizer=Adam --optimizer.lr=0.01``). ``link_to="AUTOMATIC"``: the CLI builds
        the module's ``configure_optimizers`` from it; a key (``"model.optim"``): the config goes there instead."""
        self._add_group(optimizer_class, Optimizer, nested_key, "params")
        self.optimizer_groups[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(self, lr_scheduler_class: type | tuple[type, ...] = LRSchedulerTypeTuple,
                              nested_key: str = "lr_scheduler", link_to: str = "AUTOMATIC") -> None:
        """Adds an LR scheduler's arguments (all but ``optimizer``) under ``nested_key``, as
        :meth:`add_optimizer_args` does for an optimizer."""
        self._add_group(lr_scheduler_class, LRSchedulerTypeTuple, nested_key, "optimizer")
        self.lr_scheduler_groups[nested_key] = (lr_scheduler_class, link_to)

    def _add_group(self, classes: type | tuple[type, ...], base: type | tuple[type, ...], nested_key: str,
                   skip: str) -> None:
        many = isinstance(classes, tuple)
        for cls in classes if many else (classes,):
            if not (isinstance(cls, type) and issubclass(cls, base)):
                names = " or ".join(b.__name__ for b in (base if isinstance(base, tuple) else (base,)))
                raise TypeError(f"{cls!r} given for --{nested_key} is not a subclass of {names}.")
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {skip}}
        if many:
            self.add_subclass_arguments(classes, nested_key, **kwargs)
        else:
            self.add_class_arguments(classes, nested_key, sub_configs=True, **kwargs)

    def link_optimizers_and_lr_schedulers(self) -> None:
        """Links every optimizer and scheduler group with a ``link_to`` key to that key (as a class path dict)."""
        for key, (classes, link_to) in {**self.optimizer_groups, **self.lr_scheduler_groups}.items():
            if link_to == "AUTOMATIC":
                continue
            if isinstance(classes, tuple):
                self.link_arguments(key, link_to)
            else:
                self.link_arguments(key, link_to, compute_fn=_with_class_path(classes))


def _with_class_path(cls: type) -> Callable[[Any], dict[str, Any]]:
    def compute(init_args: Any) -> dict[str, Any]:
        return class_path_dict(cls, init_args)

    return compute
