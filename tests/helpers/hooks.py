"""Hook recorders: a callback, or any class, whose every Trainer hook appends ``"<tag>:<hook>"`` to a shared list.

The hook tests compare that list with the expected sequence and counts. ``HookRecorder`` is the callback;
``record_hooks`` gives another class (a TrainingModule, for the module's side) the same recording methods, reading
``self.calls`` and ``self.tag``. The hooks are ``stoker.callbacks.base.HOOKS`` (``setup``, ``teardown``, ``on_*``).

Example:
    >>> calls: list[str] = []
    >>> trainer = Trainer(callbacks=[HookRecorder(calls, "a"), HookRecorder(calls, "b")])
    >>> @record_hooks
    ... class RecordingModule(Regressor): ...   # sets self.calls = calls and self.tag = "m"
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from stoker import Callback
from stoker.callbacks.base import HOOKS

T = TypeVar("T", bound=type)


def _recording(name: str) -> Callable[..., None]:
    def hook(self: Any, *args: Any, **kwargs: Any) -> None:  # setup/teardown get stage= as a keyword
        self.calls.append(f"{self.tag}:{name}")
    hook.__name__ = name
    return hook


def record_hooks(cls: T) -> T:
    """Replaces every hook of ``cls`` with one that appends ``f"{self.tag}:{hook}"`` to ``self.calls``."""
    for name in HOOKS:
        setattr(cls, name, _recording(name))
    return cls


@record_hooks
class HookRecorder(Callback):
    """A callback that records every hook call as ``"<tag>:<hook>"`` in ``calls`` (shared with other recorders,
    so the list shows the order across them)."""

    def __init__(self, calls: list[str], tag: str = "cb") -> None:
        self.calls, self.tag = calls, tag

    @property
    def state_key(self) -> str:
        return f"HookRecorder[{self.tag}]"
