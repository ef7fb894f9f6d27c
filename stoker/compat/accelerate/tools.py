"""Accelerate's tools that need no Accelerator: an atomic ``save`` of any object, forcing a gradient sync inside
``no_sync``, spotting a model spread over devices. The compat Accelerator's methods of the same names call them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch


def save(obj: Any, f: str | os.PathLike | Any, *, write: bool, safe_serialization: bool = False) -> None:
    """Writes ``obj`` to ``f`` (a path or a file object) when ``write`` is True.

    ``torch.save``, or safetensors (a flat dict of tensors) with ``safe_serialization``. A path is written to a
    temporary file first and renamed into place, so a crash never leaves a half-written file under that name.
    """
    if not write:
        return
    if safe_serialization:
        from safetensors.torch import save as to_bytes

        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise TypeError("save(obj, f, safe_serialization=True) needs a flat dict of tensors (a state dict); got "
                            f"{type(obj).__name__}. Use safe_serialization=False for other objects.")
        data = to_bytes({k: v.contiguous() for k, v in obj.items()}, metadata={"format": "pt"})
        writer: Callable[[Any], None] = lambda handle: handle.write(data)  # noqa: E731
    else:
        writer = lambda handle: torch.save(obj, handle)  # noqa: E731
    if not isinstance(f, (str, os.PathLike)):
        writer(f)
        return
    path = os.fspath(f)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            writer(handle)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def trigger_sync_in_backward(model: torch.nn.Module) -> Iterator[None]:
    """Makes the next backward of ``model`` synchronise gradients across processes even inside ``no_sync``.

    DDP: its reducer is told to expect a backward now; FSDP2: gradient reduction is switched on for the block.
    One process: nothing to do.
    """
    if hasattr(model, "reducer") and hasattr(model, "require_backward_grad_sync"):  # DistributedDataParallel
        old_backward, old_forward = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = True
        model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])  # the forward ran under no_sync: arm the buckets now
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = old_backward, old_forward
    elif hasattr(model, "set_requires_gradient_sync"):  # an FSDP2 module
        model.set_requires_gradient_sync(True)
        yield
    else:
        yield


def verify_device_map(model: torch.nn.Module) -> bool:
    """True when ``model`` (or a submodule) was spread over several devices with a ``hf_device_map``."""
    return any(len(getattr(m, "hf_device_map", None) or {}) > 1 for m in model.modules())
