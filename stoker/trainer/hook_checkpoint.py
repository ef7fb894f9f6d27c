"""The dict the ``on_save_checkpoint`` / ``on_load_checkpoint`` hooks get: Lightning's keys, to read.

Besides what the Trainer stores (``epoch``, ``global_step``, ``loops``, ``callbacks``, ``hyper_parameters`` when
there are any, what the hooks add), the hooks find ``state_dict``, ``optimizer_states``, ``lr_schedulers`` and
``pytorch-lightning_version`` (stoker's version) where a Lightning hook looks for them. The weights and optimizer
states are saved from the objects themselves into the checkpoint folder's safetensors files (and are loaded into
them before ``on_load_checkpoint``), so these entries are views that are never stored twice: read-only, with an
error that says so on a change, and a warning when a hook removes or replaces one (which changes nothing saved).
The Trainer's own bookkeeping travels beside this dict in the checkpoint, not in it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from ..user_frame import user_stacklevel
from ..version import __version__

VIEWS = ("state_dict", "optimizer_states", "lr_schedulers")
VERSION_KEY = "pytorch-lightning_version"  # Lightning's name for the version of the library that wrote it
_FIX = ("the Trainer saves weights and optimizer states from the module and optimizers themselves, so change "
        "those (or save a smaller checkpoint with ModelCheckpoint(save_weights_only=True))")


class ReadOnlyState(Mapping):
    """A state dict the hooks may read; assigning or deleting a key is a ``TypeError`` that says why."""

    def __init__(self, state: Mapping[str, Any], key: str) -> None:
        self._state, self._key = state, key

    def __getitem__(self, name: str) -> Any:
        return self._state[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __setitem__(self, name: str, value: Any) -> None:
        raise TypeError(f"checkpoint[{self._key!r}] is read-only in a stoker checkpoint hook: {_FIX}.")

    __delitem__ = __setitem__  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ReadOnlyState({dict(self._state)!r})"


def _state_of(obj: Any) -> Mapping[str, Any]:
    return obj.state_dict() if callable(getattr(obj, "state_dict", None)) else {}


def add_views(checkpoint: dict[str, Any], module: torch.nn.Module | None, optimizers: Iterable[Any],
              schedulers: Iterable[Any]) -> None:
    """Puts the read-only views of the objects' states into ``checkpoint`` before the hooks run."""
    add_state_views(checkpoint, module.state_dict() if module is not None else {}, map(_state_of, optimizers),
                    map(_state_of, schedulers))


def add_state_views(checkpoint: dict[str, Any], state_dict: Mapping[str, Any],
                    optimizer_states: Iterable[Mapping[str, Any]], scheduler_states: Iterable[Mapping[str, Any]]) -> None:
    """:func:`add_views` from the states themselves (a resume's hooks read them from the folder, before loading)."""
    checkpoint[VERSION_KEY] = __version__
    checkpoint["state_dict"] = ReadOnlyState(state_dict, "state_dict")
    checkpoint["optimizer_states"] = tuple(ReadOnlyState(s, "optimizer_states") for s in optimizer_states)
    checkpoint["lr_schedulers"] = tuple(ReadOnlyState(s, "lr_schedulers") for s in scheduler_states)


def without_views(checkpoint: dict[str, Any], hook: str) -> dict[str, Any]:
    """What is stored of ``checkpoint`` after the hooks ran: all but the views (the hooks' dict keeps them, as a
    hook may hold on to it), with a warning for each view a hook removed or replaced."""
    for key in VIEWS:
        if not isinstance(checkpoint.get(key), (ReadOnlyState, tuple)):
            warnings.warn(f"{hook} removed or replaced checkpoint[{key!r}], which changes nothing in a stoker "
                          f"checkpoint: {_FIX}.", UserWarning, stacklevel=user_stacklevel())
    return {k: v for k, v in checkpoint.items() if k not in VIEWS and k != VERSION_KEY}
