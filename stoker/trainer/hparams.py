"""Hyperparameters of modules and datamodules: ``hparams`` (an ``AttributeDict``) and ``save_hyperparameters``'s
reading of the calling ``__init__``'s arguments, shared by ``TrainingModule`` and ``DataModule``."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any


class AttributeDict(dict):
    """A dict whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"hparams has no {name!r}; it holds: {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


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
