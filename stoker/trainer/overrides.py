"""The one test of "this object defines hook X" for modules, callbacks and data modules.

Imports nothing of stoker, so the hook dispatcher, the module's mode hooks and the Trainer's ``module_defines``
(which callbacks read) all ask it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["defines_hook"]


def defines_hook(obj: Any, name: str, base: type) -> bool:
    """Whether ``obj`` defines ``name`` itself: set on the instance (to anything but None), or its class's ``name`` is
    not ``base``'s (``base`` may lack it). The one test of "this object defines hook X" for modules, callbacks and
    data modules.

    Example:
        >>> defines_hook(my_module, "validation_step", TrainingModule)   # doctest: +SKIP
        True
    """
    if name in getattr(obj, "__dict__", {}):  # set on the instance; None turns it off (Lightning's idiom)
        return obj.__dict__[name] is not None
    impl = getattr(type(obj), name, None)
    if impl is None:  # not on the class: an object that answers through __getattr__, e.g. a Mock(spec=Callback)
        return callable(getattr(obj, name, None))
    return impl is not getattr(base, name, None)
