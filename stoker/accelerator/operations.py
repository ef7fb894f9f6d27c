"""Tree utilities shared by the engine: move nested batches to a device, cast outputs, seed everything."""

from __future__ import annotations

import dataclasses
import gc
import os
import random
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .arguments import check_seed


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def apply_to_tensors(fn: Callable[[torch.Tensor], Any], obj: Any, movable: Callable[[Any], Any] | None = None) -> Any:
    """Applies ``fn`` to every tensor in ``obj``, rebuilding dicts, lists, tuples, namedtuples and dataclasses.

    Containers keep their type (a ``UserDict`` subclass, a namedtuple, a dataclass instance); other leaves are
    returned unchanged. With ``movable``, an object with a ``to`` method of its own (anything but a plain list,
    tuple or dict: a batch class, a graph, a ``PackedSequence``, whose ``to`` keeps its sizes on the CPU) is given to
    ``movable`` whole instead, as Lightning moves it.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if movable is not None and type(obj) not in (list, tuple, dict) and not isinstance(obj, type) \
            and callable(getattr(obj, "to", None)):
        return movable(obj)
    if isinstance(obj, (list, tuple)):
        items = [apply_to_tensors(fn, o, movable) for o in obj]
        if _is_namedtuple(obj):
            return type(obj)(*items)
        try:
            return type(obj)(items)
        except TypeError:
            return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, Mapping):
        items = {k: apply_to_tensors(fn, v, movable) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: apply_to_tensors(fn, getattr(obj, f.name), movable) for f in dataclasses.fields(obj)
                   if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def send_to_device(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Moves every tensor in a (nested) batch to ``device``, and every object with a ``to`` method (as Accelerate and
    Lightning do: a batch class of its own, a graph); other values pass through."""
    # Fast paths for the usual batches (a tensor, (x, y), a flat dict of tensors): this runs once per batch, and
    # the generic tree walk below costs several microseconds more.
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    cls = type(obj)
    if cls is tuple or cls is list:
        out = []
        for o in obj:
            if not isinstance(o, torch.Tensor):
                break
            out.append(o.to(device, non_blocking=non_blocking))
        else:
            return out if cls is list else tuple(out)
    elif cls is dict:
        moved = {}
        for k, v in obj.items():
            if not isinstance(v, torch.Tensor):
                break
            moved[k] = v.to(device, non_blocking=non_blocking)
        else:
            return moved
    return apply_to_tensors(lambda t: t.to(device, non_blocking=non_blocking), obj,
                            lambda o: _move_object(o, device, non_blocking))


def _move_object(obj: Any, device: torch.device, non_blocking: bool) -> Any:
    """``obj.to(device)`` for an object with its own ``to``; a ``to`` that takes no ``non_blocking`` is called
    without it, and one that returns None (it moved ``obj`` in place) leaves ``obj``."""
    try:
        moved = obj.to(device, non_blocking=non_blocking)
    except TypeError:
        moved = obj.to(device)
    return obj if moved is None else moved


def convert_to_fp32(obj: Any) -> Any:
    """Casts half and bfloat16 tensors in ``obj`` to float32 (other tensors and values unchanged)."""

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    return apply_to_tensors(cast, obj)


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seeds python's ``random``, numpy, torch (CPU and every CUDA device) with ``seed``.

    Args:
        seed: The seed.
        deterministic: Also ask torch for deterministic algorithms (slower; raises on ops that have none).

    Example:
        >>> set_seed(42)
    """
    check_seed(seed, example="set_seed(42)")
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional for users of the engine alone
        pass
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def _device_caches() -> list[Callable[[], None]]:
    """The ``empty_cache`` of each caching allocator this machine uses (CUDA, MPS, XPU); none on a CPU."""
    caches = [torch.cuda.empty_cache] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        caches.append(torch.mps.empty_cache)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        caches.append(xpu.empty_cache)
    return caches


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Empties the CUDA/MPS/XPU caching allocator, after ``gc.collect()`` with ``garbage_collection``.

    The collection serves the device cache (tensors kept alive only by reference cycles go back to it first), so
    on a machine without one (CPU only) it is skipped: there a full collection frees nothing a cache could return
    and costs a tenth of a second or more in a large process, at every stage change of a Trainer and every trial
    of the batch-size finder. Python's own collector still frees those cycles in its time."""
    caches = _device_caches()
    if garbage_collection and caches:
        gc.collect()
    for empty_cache in caches:
        empty_cache()
