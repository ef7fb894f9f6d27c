"""Out-of-memory helpers: ``find_executable_batch_size`` retries a function with a smaller batch, and
``release_memory`` drops references and empties the device cache."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ...accelerator.operations import clear_device_cache

_OOM_MESSAGES = (
    " out of memory.",  # CUDA, HIP, XPU
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",  # what cuDNN raises when a batch is too large for a kernel
    "DefaultCPUAllocator: can't allocate memory",
)


def release_memory(*objects: Any) -> list[None]:
    """Returns ``[None] * len(objects)`` after collecting garbage and emptying the device cache.

    Assign the result to the names you passed, so that their memory can be freed.

    Example:
        >>> model, optimizer = release_memory(model, optimizer)
    """
    result: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return result


def should_reduce_batch_size(exception: BaseException) -> bool:
    """True when ``exception`` means the batch did not fit in memory (CUDA, MPS, XPU, CPU) or cuDNN refused it."""
    if isinstance(exception, getattr(torch, "OutOfMemoryError", ())):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1 and isinstance(exception.args[0], str):
        return any(message in exception.args[0] for message in _OOM_MESSAGES)
    return False


def find_executable_batch_size(function: Callable | None = None, starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[[], int] | None = None) -> Callable:
    """Decorator: calls ``function(batch_size, *args)`` and, when it runs out of memory, frees memory and calls it
    again with half the batch size, until it succeeds or the batch size reaches 0 (a ``RuntimeError``).

    ``function`` takes the batch size as its first argument and is called without it. The size that worked is
    kept for later calls. ``reduce_batch_size_fn()`` (no arguments) may choose the next size instead of halving.
    Other exceptions are raised as they are.

    Example:
        >>> @find_executable_batch_size(starting_batch_size=128)
        ... def train(batch_size, model, optimizer):
        ...     ...
        >>> train(model, optimizer)  # tries 128, then 64, 32, ... on out-of-memory errors
    """
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    if isinstance(starting_batch_size, bool) or not isinstance(starting_batch_size, int) or starting_batch_size < 1:
        raise ValueError(f"find_executable_batch_size(starting_batch_size={starting_batch_size!r}) must be an int "
                         ">= 1.")
    batch_size = starting_batch_size

    def smaller() -> int:
        return reduce_batch_size_fn() if reduce_batch_size_fn is not None else batch_size // 2

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            shown = ", ".join(f"{name}={value!r}" for name, value in zip(params[1:], args[1:]))
            raise TypeError(f"{function.__name__}() was called with the batch size as its first argument; "
                            f"find_executable_batch_size passes it. Call {function.__name__}({shown}) instead.")
        while True:
            if batch_size <= 0:
                raise RuntimeError(f"find_executable_batch_size: {function.__name__} ran out of memory at every batch "
                                   f"size down to 1 (started at {starting_batch_size}). No executable batch size "
                                   "found: reduce the model or sequence size.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:  # noqa: BLE001 - re-raised unless it is an out-of-memory error
                if not should_reduce_batch_size(error):
                    raise
            # Outside the except block: the failed attempt's traceback (and the tensors its frames hold) is gone.
            clear_device_cache(garbage_collection=True)
            batch_size = smaller()

    return run
