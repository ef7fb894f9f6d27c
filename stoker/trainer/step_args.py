"""Which indices a module's step and batch hooks take: ``batch_idx`` may be left out of a step's signature, and
``dataloader_idx`` must be there exactly when a stage has several loaders (Lightning's rules); a step that takes
``dataloader_iter`` takes the iterator alone (``batch_iter.py``).

Owns reading the signatures (once per run, never per batch) and the error that names the method to change.
Does not own calling them (the loops do, through the call :func:`step_call` returns).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .module import TrainingModule
    from .stages import Stage

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _signature_params(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """``fn``'s parameters (``self`` already bound away), or None when Python cannot tell (a builtin, a C call)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def _takes_varargs(params: list[inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)


def takes_batch_idx(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a batch index after the batch: a parameter named ``batch_idx``, a second positional
    parameter of any name but ``dataloader_idx``, or ``*args``. ``def validation_step(self, batch)`` does not."""
    params = _signature_params(fn)
    if params is None:
        return True
    positional = [p for p in params if p.kind in _POSITIONAL and p.name != "dataloader_idx"]
    return len(positional) >= 2 or _takes_varargs(params) or any(p.name == "batch_idx" for p in params)


def takes_iterator(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a step of the ``dataloader_iter`` flavour: a parameter of that name (``*args`` is not
    enough: the flavour has to be asked for by name, as in Lightning). Raises ``TypeError`` when the step also
    requires another argument, which nothing would pass: the iterator's batches carry their own indices."""
    params = _signature_params(fn) or []
    if not any(p.name == "dataloader_iter" and p.kind in _POSITIONAL for p in params):
        return False
    others = [p.name for p in params if p.name != "dataloader_iter" and p.default is inspect.Parameter.empty
              and p.kind in (*_POSITIONAL, inspect.Parameter.KEYWORD_ONLY)]
    if others:
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "the step"))
        raise TypeError(f"{name}() takes `dataloader_iter` and also requires {', '.join(map(repr, others))}, which "
                        "the Trainer does not pass: a step of this flavour gets the iterator alone, and "
                        "next(dataloader_iter) gives (batch, batch_idx, dataloader_idx). Remove the other "
                        "parameters (or give them defaults).")
    return True


def check_no_optimizer_idx(module: TrainingModule) -> None:
    """Raises ``RuntimeError`` for a ``training_step`` written for Lightning 1's several optimizers in automatic
    optimization (an ``optimizer_idx`` parameter): nothing would ever pass it."""
    params = _signature_params(module.training_step) or []
    if any(p.name == "optimizer_idx" and p.default is inspect.Parameter.empty for p in params):
        raise RuntimeError(
            f"{type(module).__name__}.training_step() takes `optimizer_idx`, which no Trainer passes: automatic "
            "optimization steps one optimizer. Remove the `optimizer_idx` argument from `training_step`; to step "
            "several optimizers, set `self.automatic_optimization = False` and step them with `self.optimizers()`.")


def step_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself when it takes a batch index; otherwise a call that drops the index (the second argument) the
    loops pass, keeping any ``dataloader_idx`` after it. Looked up once per run: the batch loop calls the result."""
    if takes_batch_idx(fn):
        return fn

    def without_batch_idx(batch: Any, batch_idx: int, *rest: Any) -> Any:
        return fn(batch, *rest)

    return without_batch_idx


def stage_step(module: TrainingModule, stage: Stage, several: bool) -> Callable[..., Any]:
    """The call of ``stage``'s step for the loops, once the step and batch hooks are known to take the loader index
    the loop passes (:func:`check_loader_idx`): ``step(batch, batch_idx[, dataloader_idx])``; for a step of the
    ``dataloader_iter`` flavour (:func:`takes_iterator`) the step itself, called with the iterator alone."""
    step = getattr(module, stage.step)
    iterator = takes_iterator(step)
    check_loader_idx(module, stage, several, with_step=not iterator)
    return step if iterator else step_call(step)


def check_loader_idx(module: TrainingModule, stage: Stage, several: bool, with_step: bool = True) -> None:
    """Raises ``RuntimeError`` when the module's step or batch hooks of ``stage`` cannot take the ``dataloader_idx``
    the loop passes: several loaders and no ``dataloader_idx`` (nor ``*args``) to receive it, or one loader (no
    index passed) and a ``dataloader_idx`` without a default. Another name for it gets Python's own ``TypeError``.
    ``with_step=False``: the batch hooks only (a ``dataloader_iter`` step gets no index)."""
    names = (stage.step,) if with_step else ()
    for name in (*names, stage.hook("batch_start"), stage.hook("batch_end")):
        fn = getattr(module, name, None)
        params = _signature_params(fn) if callable(fn) else None
        if params is None:
            continue
        index = next((p for p in params if p.name == "dataloader_idx"), None)
        where = f"{type(module).__name__}.{name}()"
        if several and index is None and not _takes_varargs(params):
            raise RuntimeError(
                f"The {stage.name} stage has several loaders, so {where} is called with the loader's index after the "
                "batch index, and it has no `dataloader_idx` parameter to take it. Add `dataloader_idx=0` to its "
                "signature.")
        if not several and index is not None and index.default is inspect.Parameter.empty:
            raise RuntimeError(
                f"You provided only a single `{stage.loader_hook}`, but have included `dataloader_idx` in `{where}`. "
                "Either remove the argument or give it a default value i.e. `dataloader_idx=0`. (The "
                f"{stage.name} stage has a single loader, so {where} is called without a loader index, but its "
                "`dataloader_idx` parameter has no default.)")
