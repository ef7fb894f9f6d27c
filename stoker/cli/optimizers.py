"""Optimizers and LR schedulers named on the command line (``--optimizer Adam --optimizer.lr 0.01``): the types the
CLI's groups accept, building one from its class path, and the ``configure_optimizers`` the CLI gives a module when
the command line names them.

Owns no state: the parser records the groups (``parser.py``), the CLI decides when to build (``lightning_cli.py``).
No jsonargparse here, so the types import without the extra.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any, Callable, Union

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion",
           "OptimizerCallable", "ReduceLROnPlateau", "instantiate_class"]

AUTOMATIC = "AUTOMATIC"


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` that also names the metric it watches (``monitor``), so that a scheduler given
    on the command line (``--lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val_loss``) says what to step on.

    Example:
        >>> opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
        >>> ReduceLROnPlateau(opt, monitor="val_loss").monitor
        'val_loss'
    """

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# The CLI takes this ReduceLROnPlateau, not torch's (which would not say what to monitor).
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerType = Union[type[LRScheduler], type[ReduceLROnPlateau]]
# Annotations for a module's arguments that are optimizers / schedulers still to be given their parameters
OptimizerCallable = Callable[[Iterable], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], Union[LRScheduler, ReduceLROnPlateau]]


def class_path_dict(cls: type, init_args: Any = None) -> dict[str, Any]:
    """``{"class_path": "pkg.mod.Class", "init_args": {...}}`` for ``cls`` and its arguments (a dict or a
    jsonargparse Namespace)."""
    if hasattr(init_args, "as_dict"):
        init_args = init_args.as_dict()
    return {"class_path": f"{cls.__module__}.{cls.__name__}", "init_args": init_args or {}}


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """Builds ``init["class_path"]`` with ``args`` (one positional argument, or a tuple of them) and
    ``init["init_args"]``.

    Example:
        >>> params = torch.nn.Linear(2, 1).parameters()
        >>> instantiate_class(params, {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}})  # doctest: +SKIP
    """
    module_name, _, class_name = init["class_path"].rpartition(".")
    if not module_name:
        raise ValueError(f"instantiate_class: class_path {init['class_path']!r} is not a full path "
                         "(expected 'package.module.Class').")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(*(args if isinstance(args, tuple) else (args,)), **init.get("init_args", {}))


def automatic_keys(groups: dict[str, tuple[Any, str]], base: type | tuple[type, ...]) -> list[str]:
    """The groups (nested keys) of ``base`` classes whose config the CLI turns into ``configure_optimizers``."""
    keys = []
    for key, (classes, link_to) in groups.items():
        classes = classes if isinstance(classes, tuple) else (classes,)
        if link_to == AUTOMATIC and any(issubclass(c, base) for c in classes):
            keys.append(key)
    return keys


def group_init(groups: dict[str, tuple[Any, str]], key: str, value: Any) -> dict[str, Any] | None:
    """A group's parsed value as a class path dict (a single class's group holds only the arguments), or None."""
    classes = groups[key][0]
    if not isinstance(classes, tuple):
        return class_path_dict(classes, value)
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    return value or None


def default_configure_optimizers(module: Any, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
    """What the module's ``configure_optimizers`` returns when the command line named its optimizer (and scheduler):
    the optimizer; ``[optimizer], [scheduler]``; or, for a ``ReduceLROnPlateau``, the dict that names its metric."""
    if lr_scheduler is None:
        return optimizer
    if isinstance(lr_scheduler, ReduceLROnPlateau):
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor}}
    return [optimizer], [lr_scheduler]
