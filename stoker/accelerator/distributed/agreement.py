"""Agreement across processes for the layers above the engine: a preemption signal every process acts on, and the
gradients of a hand-stepped optimizer averaged over processes.

Owns: the collectives these need, so that the Trainer never calls ``torch.distributed`` itself. The blocking ones go
through the strategy's public ``all_reduce``; the one-step-late signal agreement posts a non-blocking all-reduce of
a host tensor, which the strategies do not offer (it needs a gloo group beside the training group).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .ddp import SingleDevice


def agree_on_max(strategy: SingleDevice, value: int | None, device: torch.device | str,
                 num_processes: int) -> int | None:
    """The highest ``value`` any process holds (None: none holds one), by one small blocking all-reduce.

    MAX, not SUM: two processes that both received SIGTERM must agree on SIGTERM, not on their sum.
    """
    if num_processes <= 1:
        return value
    code = torch.tensor(float(value or 0), device=device)
    return int(strategy.all_reduce(code, "max").item()) or None


def average_gradients(strategy: SingleDevice, grads: list[torch.Tensor]) -> None:
    """Averages ``grads`` across processes in place with one all-reduce of their concatenation (one collective
    per call instead of one per tensor)."""
    if not grads:
        return
    flat = strategy.all_reduce(torch.cat([g.reshape(-1) for g in grads]), "mean")
    offset = 0
    for grad in grads:
        n = grad.numel()
        grad.copy_(flat[offset:offset + n].view_as(grad))
        offset += n


def read_host_flag(buffer: torch.Tensor) -> int:
    """The agreed value held in a host (CPU) buffer: a read of host memory, no device wait on any machine."""
    return int(buffer.item())


class SignalAgreement:
    """Agrees on a small integer (a preemption signal, 0: none) across processes without a per-step wait.

    At each :meth:`step` every process posts its value as a non-blocking MAX all-reduce of a one-number *host*
    tensor, on the default group when it is gloo and otherwise on a gloo group made once for this purpose, and
    reads the result it posted one step earlier. Every process posts and reads at the same steps, so all of them
    see the same agreed value at the same step, one step late. The wait for that result is a host-to-host wait
    (the others posted it a step ago), never a wait for the GPU. Without gloo the flag goes through the device
    group and the read waits for the device. :meth:`flush` is blocking: the pending result and the current value.
    """

    def __init__(self) -> None:
        self._pending: tuple[torch.distributed.Work, torch.Tensor] | None = None  # posted one step ago
        # Weak references: a reference kept here would hold a destroyed group (and gloo's threads) alive until the
        # interpreter's finalization, which can abort the process at exit. torch's registry holds both groups for
        # as long as they are live.
        self._group: weakref.ref | None = None  # the gloo group made for the flag; None: the default group
        self._world: weakref.ref | None = None  # the default group the above was set up for
        self._on_host = True

    def reset(self) -> None:
        """Forgets a result posted earlier (every process posted it, so it completes by itself)."""
        self._pending = None

    def _setup(self) -> None:
        import torch.distributed as dist

        world = dist.group.WORLD
        if self._world is not None and self._world() is world:
            return
        self._world, self._group, self._on_host = weakref.ref(world), None, True
        if dist.get_backend() == "gloo":
            return  # the default group already works on host tensors
        if dist.is_gloo_available():
            self._group = weakref.ref(dist.new_group(backend="gloo"))  # collective: every process is at this step
        else:
            self._on_host = False

    def _post(self, device: torch.device | str, value: int | None) -> None:
        import torch.distributed as dist

        buffer = torch.full((), float(value or 0), device="cpu" if self._on_host else device)
        group = self._group() if self._group is not None else None
        work = dist.all_reduce(buffer, op=dist.ReduceOp.MAX, group=group, async_op=True)
        self._pending = (work, buffer)

    def _take(self) -> int | None:
        if self._pending is None:
            return None
        (work, buffer), self._pending = self._pending, None
        work.wait()
        # On the device (no gloo) this read waits for the device; on the host it is a read of host memory.
        return (read_host_flag(buffer) if self._on_host else int(buffer.item())) or None

    def step(self, device: torch.device | str, value: int | None) -> int | None:
        """The value agreed one step ago (None: none); posts ``value`` for the next step."""
        self._setup()
        agreed = self._take()
        if agreed is None:
            self._post(device, value)
        return agreed

    def flush(self, device: torch.device | str, value: int | None) -> int | None:
        """Blocking: the pending result and the current values together (the highest)."""
        self._setup()
        pending = self._take()
        self._post(device, value)
        now = self._take()
        return max(pending or 0, now or 0) or None
