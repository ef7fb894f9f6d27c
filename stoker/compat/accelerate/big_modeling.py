"""``accelerate.big_modeling``'s ``init_empty_weights`` / ``init_on_device``: the engine's (``stoker.accelerator.
empty_init``), with Accelerate's default for ``include_buffers`` read from ``ACCELERATE_INIT_INCLUDE_BUFFERS``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from ...accelerator import empty_init

__all__ = ["init_empty_weights", "init_on_device"]
_TRUE = {"1", "true", "yes", "y", "on", "t"}


def _include_buffers(value: bool | None) -> bool:
    if value is not None:
        return bool(value)
    return os.environ.get("ACCELERATE_INIT_INCLUDE_BUFFERS", "").strip().lower() in _TRUE


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters created inside are on the meta device (buffers too with ``include_buffers=True``; the default
    comes from ``ACCELERATE_INIT_INCLUDE_BUFFERS``, else False). See :mod:`stoker.accelerator.empty_init`."""
    with empty_init.init_empty_weights(include_buffers=_include_buffers(include_buffers)):
        yield


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters created inside are on ``device`` (buffers too with ``include_buffers=True``)."""
    with empty_init.init_on_device(device, include_buffers=_include_buffers(include_buffers)):
        yield
