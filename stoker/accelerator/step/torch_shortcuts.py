"""Three stock PyTorch calls made without their profiler ranges while no profiler runs.

Owns: when the prepared loaders and optimizers call torch's inner functions directly instead of the public call.
Does not own: what those calls do (torch's code runs either way).

``next(iterator)`` of a single-process ``DataLoader``, ``optimizer.step()`` and ``optimizer.zero_grad()`` each open
and close a ``torch.autograd.profiler.record_function`` range on every call, profiler or not, and the step goes
through two wrappers (the profiling one and an LR scheduler's marker). On a small model that is a large part of
what a step spends outside its kernels: on the tiny MLP of ``benchmarks/overhead.py`` (~430 us per step on 2 CPU
cores) these calls cost ~20 / ~70 / ~17 us, of which ~6.5 / ~11 / ~10 us are the ranges and wrappers
(benchmarks/README.md, 5 December 2026). A launch-bound model on a GPU pays the same host time.

Each shortcut does exactly what the public call does without the range, and only where that is provable from the
objects at hand; everything else gets the public call. While a profiler runs (``torch.profiler.profile``,
``torch.autograd.profiler.profile``, ``emit_nvtx``), and while ``torch.compile`` traces, the public call is made,
so profiles and compiled graphs look as they would in a hand-written loop. Exact fp32 parity with that loop is
tested (tests/accelerator/test_torch_shortcuts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.optim import optimizer as _torch_optim
from torch.utils.data import DataLoader

try:  # torch's own inner names; without them every call is the public one
    from torch.utils.data.dataloader import _DatasetKind, _SingleProcessDataLoaderIter
except ImportError:  # pragma: no cover - depends on the torch version
    _SingleProcessDataLoaderIter = None  # type: ignore[assignment,misc]

# True while a profiler records (a C call, ~60 ns); where torch lacks it, always True: no shortcuts.
profiling: Callable[[], bool] = getattr(torch._C._autograd, "_profiler_enabled", None) or (lambda: True)
_compiling: Callable[[], bool] = torch.compiler.is_compiling
_TORCH_ZERO_GRAD = torch.optim.Optimizer.zero_grad


def next_batch_function(loader: DataLoader) -> tuple[Iterator[Any], Callable[[], Any]]:
    """A new iterator over ``loader`` and the function returning its next batch (StopIteration at the end).

    For a map-style dataset loaded in this process (``num_workers=0``: torch's ``_SingleProcessDataLoaderIter``),
    the function calls the iterator's ``_next_data`` (sampler, fetch, collate, pin: what ``next`` calls inside its
    range) and counts the batch as ``next`` does. Every other loader (workers, iterable datasets, torchdata's
    ``StatefulDataLoader``) is driven with ``next``.
    """
    it = iter(loader)
    next_data = getattr(it, "_next_data", None)
    if (_SingleProcessDataLoaderIter is None or type(it) is not _SingleProcessDataLoaderIter or next_data is None
            or getattr(it, "_dataset_kind", None) != _DatasetKind.Map or not hasattr(it, "_num_yielded")):
        return it, it.__next__

    def fetch() -> Any:
        if profiling():
            return next(it)
        batch = next_data()  # StopIteration at the sampler's end, as next() raises it
        it._num_yielded += 1
        return batch

    return it, fetch


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; its class's own step called directly when that is all the public call would do.

    That holds when torch's profiling wrapper is the class's ``step`` (``hooked``), no step pre/post hook is
    registered (on the optimizer or globally), and the instance's ``step`` is absent or an LR scheduler's marker
    around that same wrapper (the marker records that the optimizer stepped, so the scheduler does not warn that it
    stepped first: recorded here too). Anything else, e.g. a ``step`` patched on the instance, gets the call.
    """
    cls_step = type(optimizer).step
    inner = getattr(cls_step, "__wrapped__", None)
    own = optimizer.__dict__.get("step")
    if (inner is None or not getattr(cls_step, "hooked", False) or profiling() or _compiling()
            or own is not None and not (getattr(own, "_wrapped_by_lr_sched", False)
                                        and getattr(own, "__wrapped__", None) is cls_step)
            or getattr(optimizer, "_optimizer_step_pre_hooks", True)
            or getattr(optimizer, "_optimizer_step_post_hooks", True)
            or _torch_optim._global_optimizer_pre_hooks or _torch_optim._global_optimizer_post_hooks):
        optimizer.step()
        return
    if own is not None:
        optimizer._opt_called = True  # what the scheduler's marker records
    inner(optimizer)


def zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``: every parameter's gradient set to None, as torch's own method
    does; an optimizer class (or instance) with its own ``zero_grad`` gets the call."""
    if (type(optimizer).zero_grad is not _TORCH_ZERO_GRAD or "zero_grad" in optimizer.__dict__ or profiling()
            or _compiling()):
        optimizer.zero_grad(set_to_none=True)
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
