"""Counts the calls that would make the host wait for the GPU, so a CPU test can prove a step is sync-free.

On a GPU, Python runs ahead of the device: kernels are queued and the host only waits when it needs a value (a
``.item()``, ``bool(t)``, a copy to the CPU, ...) or when a blocking collective returns. Each such call per step
stalls the queue. CUDA's own detector (``torch.cuda.set_sync_debug_mode("error")``) needs a GPU; this counter
patches the Python entry points of those calls in a ``with`` block and records every call with its call site, so a
test on CPU can assert the count per optimizer step.

What is counted (each outermost call once; calls nested inside a counted call are not counted again):

- ``Tensor.item``, ``tolist``, ``numpy``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``, ``nonzero``
  (data-dependent output size), and ``torch.equal``/``allclose``/``is_nonzero``/``nonzero``/``masked_select``/
  ``unique`` (they return host values or shapes);
- copies to the CPU: ``Tensor.cpu()`` and ``Tensor.to(...)`` with a CPU destination;
- blocking ``torch.distributed`` collectives (``all_reduce`` etc. without ``async_op=True``, ``barrier``, the
  ``*_object`` collectives) and ``torch.cuda.synchronize``.

``simulate=True`` (the default) treats every tensor as a device tensor, which is what a CPU run stands in for. Two
kinds of call run on the host on any machine and are therefore not counted in that mode: the input pipeline
(anything called from ``torch.utils.data``: samplers, fetchers, collate) and the prepared loader's placement of
batches (``stoker.accelerator.operations.send_to_device``; on a GPU it is a host-to-device copy, whose blocking is
the loader's pinned-memory/``non_blocking`` setting, not a device-to-host wait), and torch optimizers reading their
step counters (``torch.optim.optimizer._get_value``: those counters stay on the CPU unless capturable or fused),
and the Trainer's preemption agreement reading its gloo-reduced CPU flag (``agreement.read_host_flag``).
In that mode a ``.to(...)`` counts only when its destination is written as the string ``"cpu"``: on a CPU run the
device is the CPU, so ``.to(tensor.device)`` cannot be told apart from a copy to the host (``.to(torch.device("cpu"))``
is therefore missed here; the GPU check's ``set_sync_debug_mode`` catches it). ``simulate=False`` counts only calls
on non-CPU tensors (for use on a GPU machine).

Example:
    >>> with SyncCounter() as sync:
    ...     for _ in range(10):
    ...         train_step()
    >>> assert sync.count == 0, sync.report()
    >>> counter = SyncCounter(); counter.start(); ...; counter.stop()  # a span a callback opens and closes

``tests/helpers/sync_loops.py`` runs the tutorial loop and ``Trainer.fit`` with a counted span of optimizer steps.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

_TENSOR_METHODS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "nonzero")
_TORCH_FUNCTIONS = ("equal", "allclose", "is_nonzero", "nonzero", "masked_select", "unique")
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "broadcast", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single")
_BLOCKING_ALWAYS = ("barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
                    "scatter_object_list")

_HERE = os.path.abspath(__file__)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TORCH_DATA = os.path.join(_TORCH_DIR, "utils", "data") + os.sep
# (path suffix, function) of calls that touch only host tensors on a GPU machine too: the prepared loader's batch
# placement (host to device), and torch optimizers reading their step counters (kept on the CPU unless capturable
# or fused, exactly so that this read does not sync).
# The Trainer's preemption agreement reads its flag from a CPU tensor reduced over gloo (host memory on any machine).
_HOST_FUNCTIONS = (("stoker/accelerator/operations.py", "send_to_device"), ("torch/optim/optimizer.py", "_get_value"),
                   ("stoker/accelerator/distributed/agreement.py", "read_host_flag"))


@dataclass(frozen=True)
class SyncEvent:
    """One counted call: what it was and where the user-visible code called it from."""

    kind: str  # e.g. "Tensor.item", "dist.all_reduce"
    site: str  # "path/to/file.py:123 in function" of the nearest frame outside torch and this module
    thread: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.site} [{self.thread}]"


class SyncCounter:
    """Context manager that counts would-be host-device syncs (see the module docstring).

    Args:
        simulate: Treat every tensor as a device tensor (CPU stand-in for a GPU run); see the module docstring.
        count_host_input: Also count calls made by the host input pipeline and batch placement (off by default).

    Attributes:
        events: Every counted call, in order.
    """

    def __init__(self, simulate: bool = True, count_host_input: bool = False) -> None:
        self.simulate = simulate
        self.count_host_input = count_host_input
        self.events: list[SyncEvent] = []
        self._patches: list[tuple[Any, str, bool, Any]] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self.paused = False

    # -- results ---------------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Number of counted calls so far."""
        return len(self.events)

    def by_kind(self) -> Counter:
        return Counter(e.kind for e in self.events)

    def by_site(self) -> Counter:
        return Counter(f"{e.kind} at {e.site}" for e in self.events)

    def reset(self) -> None:
        """Forgets what was counted (keeps counting)."""
        with self._lock:
            self.events.clear()

    def report(self) -> str:
        """A readable summary for assertion messages: count, then each call site with its count."""
        lines = [f"{self.count} would-be host-device sync(s):"]
        lines += [f"  {n} x {site}" for site, n in self.by_site().most_common()]
        return "\n".join(lines)

    # -- patching --------------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """True between :meth:`start` (or ``__enter__``) and :meth:`stop`."""
        return bool(self._patches)

    def start(self) -> SyncCounter:
        """Starts counting (for spans that a ``with`` block cannot delimit, e.g. from a callback)."""
        return self.__enter__()

    def stop(self) -> None:
        """Stops counting and restores torch; does nothing when not counting."""
        if self._patches:
            self.__exit__(None, None, None)

    def __enter__(self) -> SyncCounter:
        if self._patches:
            raise RuntimeError("SyncCounter is already active: use one `with` block at a time.")
        for name in _TENSOR_METHODS:
            self._patch(torch.Tensor, name, f"Tensor.{name}", self._tensor_check)
        self._patch(torch.Tensor, "cpu", "Tensor.cpu", self._tensor_check)
        self._patch(torch.Tensor, "to", "Tensor.to(cpu)", self._to_check)
        for name in _TORCH_FUNCTIONS:
            self._patch(torch, name, f"torch.{name}", self._first_tensor_check)
        if torch.cuda.is_available():
            self._patch(torch.cuda, "synchronize", "torch.cuda.synchronize", _always)
        if torch.distributed.is_available():
            import torch.distributed.distributed_c10d as c10d

            for module in (torch.distributed, c10d):
                for name in _COLLECTIVES:
                    self._patch(module, name, f"dist.{name}", _blocking_collective)
                for name in _BLOCKING_ALWAYS:
                    self._patch(module, name, f"dist.{name}", _always)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for owner, name, had_own, original in reversed(self._patches):
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self._patches.clear()

    def _patch(self, owner: Any, name: str, kind: str, check: Callable[..., bool]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        had_own = name in vars(owner)
        counter = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            local = counter._local
            if getattr(local, "depth", 0) or counter.paused:
                return original(*args, **kwargs)
            local.depth = 1
            try:
                if check(args, kwargs):
                    counter._record(kind)
                return original(*args, **kwargs)
            finally:
                local.depth = 0

        setattr(owner, name, wrapper)
        self._patches.append((owner, name, had_own, original))

    # -- what counts -----------------------------------------------------------------------------------------
    def _on_device(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor) and (self.simulate or tensor.device.type != "cpu")

    def _tensor_check(self, args: tuple, kwargs: dict) -> bool:
        return bool(args) and self._on_device(args[0])

    def _first_tensor_check(self, args: tuple, kwargs: dict) -> bool:
        return any(self._on_device(a) for a in args[:2])

    def _to_check(self, args: tuple, kwargs: dict) -> bool:
        if not args or not self._on_device(args[0]):
            return False
        dest = kwargs.get("device")
        for a in args[1:]:
            if isinstance(a, (str, torch.device, int)):
                dest = a
                break
            if isinstance(a, torch.Tensor):
                dest = a.device
                break
        if dest is None or isinstance(dest, int):
            return False  # a dtype change, or an accelerator index
        if self.simulate:
            # On CPU the device *is* the CPU: `.to(p.device)` or `.to(accelerator.device)` would stay on the GPU
            # there. Only a destination written as "cpu" means the host.
            return isinstance(dest, str) and dest.split(":")[0] == "cpu"
        return torch.device(dest).type == "cpu"

    def _record(self, kind: str) -> None:
        frames = list(_stack())
        if self.simulate and not self.count_host_input and _is_host_input(frames):
            return
        site = next((f for f in frames if not f[0].startswith(_TORCH_DIR) and f[0] != _HERE), None)
        where = f"{_short(site[0])}:{site[1]} in {site[2]}" if site else "<torch internals>"
        with self._lock:
            self.events.append(SyncEvent(kind, where, threading.current_thread().name))


def _always(args: tuple, kwargs: dict) -> bool:
    return True


def _blocking_collective(args: tuple, kwargs: dict) -> bool:
    return not kwargs.get("async_op", False)


def _stack() -> Iterator[tuple[str, int, str]]:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        yield os.path.abspath(code.co_filename), frame.f_lineno, code.co_name
        frame = frame.f_back


def _is_host_input(frames: list[tuple[str, int, str]]) -> bool:
    for path, _, func in frames:
        if path.startswith(_TORCH_DATA):
            return True
        for suffix, name in _HOST_FUNCTIONS:
            if func == name and path.replace(os.sep, "/").endswith(suffix):
                return True
    return False


def _short(path: str) -> str:
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


def count_per_step(step: Callable[[], Any], steps: int, warmup: int = 2, **kwargs: Any) -> tuple[float, SyncCounter]:
    """Runs ``step`` ``warmup`` times uncounted, then ``steps`` times counted; returns (syncs per step, counter).

    The warm-up keeps one-time work (lazy state creation in the optimizer or scaler) out of the per-step figure.
    """
    for _ in range(warmup):
        step()
    with SyncCounter(**kwargs) as counter:
        for _ in range(steps):
            step()
    return counter.count / steps, counter
