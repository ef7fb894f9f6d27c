"""``class_only``: a ``classmethod`` that refuses to run when called on an instance.

``model.load_from_checkpoint(path)`` on an instance returns a new module and leaves ``model`` as it was; a script
that drops the result evaluates or trains the old weights without a word. Lightning makes that call a
``TypeError``, and so does stoker (the attribute can still be looked up, e.g. by ``inspect.getmembers``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

__all__ = ["class_only"]


class class_only(classmethod):  # noqa: N801 (used as a decorator, like classmethod)
    def __get__(self, instance: Any, owner: type | None = None) -> Callable[..., Any]:  # type: ignore[override]
        method = self.__func__
        cls = owner if owner is not None else type(instance)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            if instance is not None:
                raise TypeError(f"The classmethod `{cls.__name__}.{method.__name__}` cannot be called on an instance: "
                                f"it builds a new object and leaves this one as it was. Call it on the class and "
                                f"keep what it returns: obj = {cls.__name__}.{method.__name__}(...).")
            return method(cls, *args, **kwargs)

        return call
