"""Strategies: how a model and its data are spread over processes. The only place "distributed" strings are parsed.

``SingleDevice`` is one process on one device; ``DDPStrategy`` wraps the model in ``DistributedDataParallel`` and
shards data over the processes that ``torchrun`` started. The Accelerator holds one strategy object and calls it;
it never asks which one it has.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

STRATEGY_CHOICES = ("auto", "ddp", "fsdp", "single")


def default_device(cpu: bool = False, local_rank: int = 0) -> torch.device:
    """CUDA (this process's local GPU), then MPS, then CPU; ``cpu=True`` forces CPU."""
    if not cpu and torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if not cpu and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def launched_world_size() -> int:
    """The process count a launcher (torchrun) announced, or 1."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class SingleDevice:
    """One process, one device: collectives are identities and nothing is wrapped."""

    is_distributed = False
    num_processes = 1
    process_index = 0
    local_process_index = 0

    def __init__(self, device: torch.device) -> None:
        self.device = device

    # -- models ---------------------------------------------------------------------------------------------
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(self.device)

    def no_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def unwrap(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def model_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full (unsharded) state dict of the unwrapped module, on every process that calls it."""
        return module.state_dict()

    # -- collectives ------------------------------------------------------------------------------------------
    def barrier(self) -> None:
        pass

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenates every process's ``tensor`` (same shape everywhere) along dim 0."""
        return tensor if tensor.dim() > 0 else tensor.reshape(1)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return obj

    def teardown(self) -> None:
        pass


class DDPStrategy(SingleDevice):
    """Several processes (launched by ``torchrun``), each with its own device, gradients averaged by DDP."""

    is_distributed = True

    def __init__(self, device: torch.device | None = None, *, cpu: bool = False, timeout_s: float = 1800.0) -> None:
        self.local_process_index = int(os.environ.get("LOCAL_RANK", "0"))
        device = device or default_device(cpu, self.local_process_index)
        super().__init__(device)
        self._created_group = False
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
            self._created_group = True
        self.process_index = dist.get_rank()
        self.num_processes = dist.get_world_size()

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        module = module.to(self.device)
        if not any(p.requires_grad for p in module.parameters()):
            return module  # nothing to synchronise (a frozen model used for inference)
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids)

    def no_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager:
        sync_off = getattr(module, "no_sync", None)
        return sync_off() if callable(sync_off) else contextlib.nullcontext()

    def unwrap(self, module: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        return module.module if isinstance(module, DistributedDataParallel) else module

    def _alive(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def barrier(self) -> None:
        if self._alive():
            dist.barrier()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN}
        out = tensor.clone()
        dist.all_reduce(out, op=ops[op])
        return out / self.num_processes if op == "mean" else out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous() if tensor.dim() > 0 else tensor.reshape(1)
        parts = [torch.empty_like(tensor) for _ in range(self.num_processes)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.num_processes
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def teardown(self) -> None:
        # Only a group we created is ours to destroy; the user may already have destroyed it.
        if self._created_group and self._alive():
            dist.destroy_process_group()
        self._created_group = False


def make_strategy(name: str, *, cpu: bool = False) -> SingleDevice:
    """Builds the strategy for ``Accelerator(strategy=name)``."""
    if not isinstance(name, str) or name.lower() not in STRATEGY_CHOICES:
        raise ValueError(
            f"Accelerator(strategy={name!r}) is not a strategy. Expected one of: "
            + ", ".join(repr(c) for c in STRATEGY_CHOICES) + "."
        )
    name = name.lower()
    many = launched_world_size() > 1 or (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    if name == "fsdp":
        from .fsdp import FSDPStrategy

        return FSDPStrategy(cpu=cpu)
    if name == "ddp" or (name == "auto" and many):
        if not many and not dist.is_initialized():
            return SingleDevice(default_device(cpu))  # "ddp" in one process: nothing to wrap
        return DDPStrategy(cpu=cpu)
    return SingleDevice(default_device(cpu))


def iter_chunks(seq: list, size: int) -> Iterator[list]:
    for start in range(0, len(seq), size):
        yield seq[start:start + size]
