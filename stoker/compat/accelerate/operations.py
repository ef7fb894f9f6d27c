"""Collectives as module-level functions (Accelerate's ``accelerate.utils`` names), on torch's default process group.

They need no Accelerator: in a process that joined a group (through an Accelerator, a ``PartialState`` or the
user's own ``init_process_group``) they talk to all its processes; otherwise they act on this process alone.
Every process must call a collective at the same point. Nested lists, tuples, dicts, namedtuples and
dataclasses of tensors are handled like single tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from ...accelerator.distributed import collectives
from ...accelerator.operations import apply_to_tensors, send_to_device  # noqa: F401 - re-exported

_REDUCTIONS = ("sum", "mean", "max", "min")


def _world() -> Any:
    """A strategy object for torch's default group (or for this process alone when there is none)."""
    import torch.distributed as dist

    from ...accelerator.distributed.strategy import DDPStrategy, SingleDevice

    if not (dist.is_available() and dist.is_initialized()):
        return SingleDevice(torch.device("cpu"))
    return DDPStrategy().adopt_existing_group()


def gather(tensor: Any) -> Any:
    """Every process's tensors concatenated along dim 0, on every process (scalars become 1-D).

    Example:
        >>> gather(torch.tensor([rank]))  # in 2 processes
        tensor([0, 1])
    """
    return collectives.gather(_world(), tensor)


def gather_object(obj: Any) -> Any:
    """Every process's picklable ``obj`` on every process: lists are concatenated, other objects listed in
    process order. In one process, ``obj`` itself."""
    world = _world()
    if world.num_processes == 1:
        return obj
    parts = world.all_gather_object(obj)
    return [x for part in parts for x in (part if isinstance(part, (list, tuple)) else [part])]


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Process ``from_process``'s tensors, copied into every process's tensors of the same shapes (in place)."""
    import torch.distributed as dist

    world = _world()
    if world.num_processes == 1:
        return tensor

    def copy(t: torch.Tensor) -> torch.Tensor:
        dist.broadcast(t, src=from_process)
        return t

    return apply_to_tensors(copy, tensor)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Fills ``object_list`` (in place, and returns it) with process ``from_process``'s picklable objects."""
    import torch.distributed as dist

    world = _world()
    if world.num_processes > 1:
        dist.broadcast_object_list(object_list, src=from_process, device=world.device)
    return object_list


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Every tensor reduced over the processes (``"mean"``, ``"sum"``, ``"max"`` or ``"min"``), times ``scale``.

    The input is never changed (one process: a copy). Note that the default is ``"mean"``, as in Accelerate's
    module-level ``reduce`` (``Accelerator.reduce`` sums by default).
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduce(reduction={reduction!r}) is not a reduction. Expected one of: {_REDUCTIONS}.")
    world = _world()

    def one(t: torch.Tensor) -> torch.Tensor:
        out = world.all_reduce(t, reduction) if world.num_processes > 1 else t.clone()
        return out * scale if scale != 1.0 else out

    return apply_to_tensors(one, tensor)


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pads every tensor along ``dim`` to the largest size any process has (so that it can be gathered)."""
    return collectives.pad_across_processes(_world(), tensor, dim, pad_index, pad_first)


def wait_for_everyone() -> None:
    """Blocks until every process of the default group reaches this call."""
    _world().barrier()


def synchronize_rng_states(rng_types: list[str], generator: torch.Generator | None = None) -> None:
    """Copies process 0's random state to every process for each of ``rng_types``: ``"torch"`` (the CPU
    generator), ``"cuda"``/``"mps"``/``"xpu"`` (this process's device generator) and ``"generator"`` (the one
    passed)."""
    import torch.distributed as dist

    world = _world()
    if world.num_processes == 1:
        return
    for rng_type in rng_types:
        rng_type = str(getattr(rng_type, "value", rng_type)).lower()
        getter, setter = _rng_accessors(rng_type, generator)
        state = getter().to(world.device)
        dist.broadcast(state, src=0)
        setter(state.cpu())


def _rng_accessors(rng_type: str, generator: torch.Generator | None) -> tuple[Any, Any]:
    if rng_type == "torch":
        return torch.get_rng_state, torch.set_rng_state
    if rng_type == "generator":
        if generator is None:
            raise ValueError("synchronize_rng_states(['generator']) needs generator=...: the generator to copy.")
        return generator.get_state, generator.set_state
    module = getattr(torch, rng_type, None)
    if rng_type not in ("cuda", "mps", "xpu") or module is None or not module.is_available():
        raise ValueError(f"synchronize_rng_states: {rng_type!r} is not an RNG type this machine has. Expected "
                         "'torch', 'generator' or the device type ('cuda', 'mps', 'xpu').")
    return module.get_rng_state, module.set_rng_state
