"""The one test of "this object defines hook X" for modules, callbacks and data modules.

Imports nothing of stoker, so the hook dispatcher, the module's mode hooks and the Trainer's ``module_defines``
(which callbacks read) all ask it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["defines_hook"]


def defines_hook(obj: Any, name: str, base: type, *, unwrap: bool = False) -> bool:
    """Whether ``obj`` defines ``name`` itself: set on the instance (to anything but None), or its class's ``name`` is
    not ``base``'s (``base`` may lack it). The one test of "this object defines hook X" for modules, callbacks and
    data modules.

    ``unwrap``: a wrapper set on the instance (``functools.wraps`` / ``update_wrapper``, ``functools.partial``) counts
    as what it wraps, so wrapping the default does not define the hook. Lightning's rule where the answer decides
    whose hook runs (a data module's transfer hooks, or else the module's); where it only decides whether to call, a
    wrapper is called (it may record or time the call).

    Example:
        >>> defines_hook(my_module, "validation_step", TrainingModule)   # doctest: +SKIP
        True
    """
    if name in getattr(obj, "__dict__", {}):  # set on the instance; None turns it off (Lightning's idiom)
        value = obj.__dict__[name]
        inner = getattr(value, "__wrapped__", getattr(value, "func", None)) if unwrap else None
        if inner is None:
            return value is not None
        return getattr(inner, "__func__", inner) is not getattr(base, name, None)  # a bound method: its function
    impl = getattr(type(obj), name, None)
    if impl is None:  # not on the class: an object that answers through __getattr__, e.g. a Mock(spec=Callback)
        return callable(getattr(obj, name, None))
    return impl is not getattr(base, name, None)
