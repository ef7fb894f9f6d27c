"""Hyperparameters of modules and datamodules: ``hparams`` (an ``AttributeDict``), ``save_hyperparameters`` (shared
by ``TrainingModule`` and ``DataModule``: the calling ``__init__``'s arguments, or a mapping given to it), and what
the Trainer sends to its loggers when ``fit`` starts (the two merged, unless saved with ``logger=False``)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from ..loggers import Logger

# The attribute save_hyperparameters(logger=...) sets on its owner (Lightning's name, which scripts read); only this
# module writes or reads it. Absent: the owner's hparams go to the loggers when it has any.
_TO_LOGGERS = "_log_hyperparams"


class AttributeDict(dict):
    """A dict whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"hparams has no {name!r}; it holds: {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class HparamsOwner(Protocol):
    """What keeps hyperparameters: a ``TrainingModule`` or a ``DataModule`` (a protocol: both import this module)."""

    hparams: AttributeDict


def caller_init_arguments(owner: object, frame: Any, names: tuple[str, ...], ignore: Sequence[str] | str | None
                          ) -> dict[str, Any]:
    """The arguments of the ``__init__`` that called ``owner.save_hyperparameters`` (``frame``: that method's
    frame), limited to ``names`` when given and without ``ignore``."""
    caller = frame.f_back if frame is not None else None
    if caller is None:
        raise RuntimeError("save_hyperparameters() could not find the calling __init__ (no frame information).")
    try:
        values = _init_arguments(caller)
    finally:
        del caller
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    if names:
        unknown = [n for n in names if n not in values]
        if unknown:
            raise ValueError(f"save_hyperparameters({', '.join(map(repr, names))}): {unknown} are not arguments "
                             f"of {type(owner).__name__}.__init__; its arguments are {sorted(values)}.")
        values = {n: values[n] for n in names}
    return {k: v for k, v in values.items() if k not in ignored}


def _init_arguments(frame: Any) -> dict[str, Any]:
    """The named arguments (and ``**kwargs``) of the function running in ``frame``, without ``self``."""
    code = frame.f_code
    local = frame.f_locals
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    values = {n: local[n] for n in names[1:] if n in local}  # names[0] is self
    flags = code.co_flags
    position = count
    if flags & inspect.CO_VARARGS:
        star = code.co_varnames[position]
        if local.get(star):
            values[star] = list(local[star])
        position += 1
    if flags & inspect.CO_VARKEYWORDS:
        values.update(local.get(code.co_varnames[position], {}))
    return values


def save_hyperparameters(owner: HparamsOwner, frame: Any, args: tuple[Any, ...], ignore: Sequence[str] | str | None,
                         logger: bool) -> None:
    """``owner.save_hyperparameters(*args, ignore=..., logger=...)`` (``frame``: that method's frame).

    ``args`` are argument names of the calling ``__init__`` (none: all of them), or one mapping, ``Namespace`` or
    dataclass instance whose items are the hyperparameters (Lightning's ``save_hyperparameters(hparams)``).
    ``logger=False`` keeps them in ``hparams`` and checkpoints but out of the loggers.
    """
    if not isinstance(logger, bool):
        raise TypeError(f"save_hyperparameters(logger={logger!r}) must be True or False.")
    if len(args) == 1 and not isinstance(args[0], str):
        values = _given_hparams(args[0], ignore)
    else:
        bad = [a for a in args if not isinstance(a, str)]
        if bad:
            raise TypeError(f"save_hyperparameters{args!r}: pass argument names (strings) of __init__, or a single "
                            f"mapping of hyperparameters; got {type(bad[0]).__name__}.")
        values = caller_init_arguments(owner, frame, args, ignore)
    if "hparams" not in vars(owner):  # a subclass that did not call super().__init__() first
        object.__setattr__(owner, "hparams", AttributeDict())
    owner.hparams.update(values)
    object.__setattr__(owner, _TO_LOGGERS, logger)


def _given_hparams(given: Any, ignore: Sequence[str] | str | None) -> dict[Any, Any]:
    """The items of the one object given to ``save_hyperparameters``, without ``ignore``."""
    if isinstance(given, argparse.Namespace):
        given = vars(given)
    elif dataclasses.is_dataclass(given) and not isinstance(given, type):
        given = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}
    if not isinstance(given, Mapping):
        raise TypeError(f"save_hyperparameters({given!r}): expected argument names of __init__, or one mapping, "
                        f"argparse.Namespace or dataclass instance of hyperparameters; got {type(given).__name__}.")
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    return {k: v for k, v in given.items() if k not in ignored}


def hparams_for_loggers(module: HparamsOwner, datamodule: HparamsOwner | None = None) -> dict[Any, Any]:
    """The hyperparameters the loggers get: the module's and the datamodule's (each unless saved with
    ``logger=False``), merged; empty when there are none.

    Raises:
        RuntimeError: a key both have, with different values (which one the loggers should show is unknowable).
    """
    parts = [dict(getattr(owner, "hparams", {}) or {}) for owner in (module, datamodule)
             if owner is not None and getattr(owner, _TO_LOGGERS, True)]
    if len(parts) < 2:
        return parts[0] if parts else {}
    ours, theirs = parts
    clashes = [key for key in ours.keys() & theirs.keys() if _differ(ours[key], theirs[key])]
    if clashes:
        detail = ", ".join(f"{k!r}: {ours[k]!r} in the module, {theirs[k]!r} in the datamodule" for k in clashes)
        raise RuntimeError(f"Error while merging hparams for the loggers: {detail}. Give the key one value, rename "
                           "it in one of them, or save one side's hyperparameters with logger=False.")
    return {**ours, **theirs}


def _differ(a: Any, b: Any) -> bool:
    """Whether two values of one hyperparameter disagree (tensors by value; objects that cannot be compared: unless
    they are the same object)."""
    if type(a) is not type(b):
        return True
    if isinstance(a, torch.Tensor):
        return a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.cpu(), b.cpu())
    try:
        return bool(a != b)
    except Exception:  # an object whose comparison is no bool (an array) or fails
        return a is not b


def log_hyperparams(module: torch.nn.Module, datamodule: HparamsOwner | None, loggers: list[Logger], main: bool
                    ) -> None:
    """At the start of ``fit``: the merged hyperparameters (`hparams_for_loggers`, checked on every process so that a
    clash stops them all), then on the main process, to each logger, those (when there are any), the module's
    graph, and ``save`` (Lightning's order; ``log_graph`` does nothing unless a logger records graphs, ``save``
    writes the run's ``hparams.yaml`` when a logger keeps one)."""
    if not loggers:
        return
    hparams = hparams_for_loggers(module, datamodule)
    if not main:
        return
    for logger in loggers:
        if hparams:
            logger.log_hyperparams(hparams)
        logger.log_graph(module)
        logger.save()
