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

Every private torch name relied on is looked up and checked once, at import (:func:`detect`), on a probe optimizer,
LR scheduler and loader. If any is missing or behaves differently, ``ENABLED`` is False and every call is the
public one: a torch release that changes its internals makes stoker slower by a few microseconds, never wrong.
Each relied-on internal has its own test, which fails when torch changes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader

_TORCH_ZERO_GRAD = torch.optim.Optimizer.zero_grad
_compiling: Callable[[], bool] = torch.compiler.is_compiling


class Internals(NamedTuple):
    """The private torch names the shortcuts use, found and checked by :func:`detect`."""

    single_process_iter: type  # torch.utils.data.dataloader._SingleProcessDataLoaderIter
    map_kind: Any  # torch.utils.data.dataloader._DatasetKind.Map
    profiler_enabled: Callable[[], bool]  # torch._C._autograd._profiler_enabled
    global_pre_hooks: dict  # torch.optim.optimizer._global_optimizer_pre_hooks
    global_post_hooks: dict  # torch.optim.optimizer._global_optimizer_post_hooks


def detect() -> Internals | None:
    """The internals, checked on a probe loader to behave as the shortcuts assume; None if anything differs.

    (An optimizer cannot be probed at import: building one imports ``torch._dynamo``. :func:`optimizer_internals_ok`
    checks the optimizer's internals once, when the first prepared optimizer steps.)"""
    try:
        from torch.optim import optimizer as torch_optim
        from torch.utils.data.dataloader import _DatasetKind, _SingleProcessDataLoaderIter

        found = Internals(_SingleProcessDataLoaderIter, _DatasetKind.Map, torch._C._autograd._profiler_enabled,
                          torch_optim._global_optimizer_pre_hooks, torch_optim._global_optimizer_post_hooks)
        it = iter(DataLoader([0]))
        ok = (isinstance(found.global_pre_hooks, dict) and isinstance(found.global_post_hooks, dict)
              and found.profiler_enabled() is False and type(it) is _SingleProcessDataLoaderIter
              and callable(getattr(it, "_next_data", None)) and it._dataset_kind == _DatasetKind.Map
              and it._num_yielded == 0)
        return found if ok else None
    except Exception:  # noqa: BLE001 - any surprise in torch's internals means: public calls only
        return None


def optimizer_internals_ok() -> bool:
    """Whether an optimizer and an LR scheduler behave as :func:`optimizer_step` assumes, checked on a probe."""
    try:
        probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
        cls_step = type(probe).step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.optim.lr_scheduler.LambdaLR(probe, lambda epoch: 1.0)
        marker = probe.__dict__.get("step")
        probe.step()  # through the marker, which records that the optimizer stepped (no gradients: no change)
        return bool(getattr(cls_step, "hooked", False) and callable(getattr(cls_step, "__wrapped__", None))
                    and getattr(marker, "_wrapped_by_lr_sched", False) and getattr(marker, "__wrapped__", None)
                    is cls_step and getattr(probe, "_opt_called", False) is True
                    and isinstance(probe._optimizer_step_pre_hooks, dict)
                    and isinstance(probe._optimizer_step_post_hooks, dict))
    except Exception:  # noqa: BLE001 - see detect()
        return False


_INTERNALS = detect()
# False: every call is the public one. Tests set it to check that the public calls give the same training.
ENABLED = _INTERNALS is not None
_optimizer_ok: bool | None = None  # optimizer_internals_ok(), once, at the first optimizer step


def profiling() -> bool:
    """True while a profiler records (then the public calls keep their ranges); True too without the shortcuts."""
    return not ENABLED or _INTERNALS.profiler_enabled()  # type: ignore[union-attr]


def next_batch_function(loader: DataLoader) -> tuple[Iterator[Any], Callable[[], Any]]:
    """A new iterator over ``loader`` and the function returning its next batch (StopIteration at the end).

    For a map-style dataset loaded in this process (``num_workers=0``: torch's ``_SingleProcessDataLoaderIter``),
    the function calls the iterator's ``_next_data`` (sampler, fetch, collate, pin: what ``next`` calls inside its
    range) and counts the batch as ``next`` does. Every other loader (workers, iterable datasets, torchdata's
    ``StatefulDataLoader``) is driven with ``next``.
    """
    it = iter(loader)
    internals = _INTERNALS
    if not ENABLED or type(it) is not internals.single_process_iter or it._dataset_kind != internals.map_kind:
        return it, it.__next__
    next_data = it._next_data
    profiler_enabled = internals.profiler_enabled

    def fetch() -> Any:
        if profiler_enabled():
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
    global _optimizer_ok
    if _optimizer_ok is None:
        _optimizer_ok = optimizer_internals_ok()
    cls_step = type(optimizer).step
    inner = getattr(cls_step, "__wrapped__", None)
    own = optimizer.__dict__.get("step")
    if (not _optimizer_ok or inner is None or not getattr(cls_step, "hooked", False) or profiling() or _compiling()
            or own is not None and not (getattr(own, "_wrapped_by_lr_sched", False)
                                        and getattr(own, "__wrapped__", None) is cls_step)
            or getattr(optimizer, "_optimizer_step_pre_hooks", True)
            or getattr(optimizer, "_optimizer_step_post_hooks", True)
            or _INTERNALS.global_pre_hooks or _INTERNALS.global_post_hooks):  # type: ignore[union-attr]
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
