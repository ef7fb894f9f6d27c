"""The strategy resolver: the only place "distributed" strategy names are parsed.

``make_strategy`` turns ``Accelerator(strategy=...)`` (a name or a configured object) into a ready strategy. The
classes it picks live apart from it: ``SingleDevice`` and ``DDPStrategy`` in ``ddp.py``, ``FSDPStrategy`` in
``fsdp.py``; they are re-exported here so ``stoker.accelerator.strategy`` keeps naming them. The Accelerator holds
one strategy object and calls it; it never asks which one it has.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from .ddp import DDPStrategy, SingleDevice, default_device, launched_world_size
from .fsdp import FSDPStrategy

__all__ = ["DDPStrategy", "FSDPStrategy", "STRATEGY_CHOICES", "SingleDevice", "default_device", "launched_world_size",
           "make_strategy"]

STRATEGY_CHOICES = ("auto", "ddp", "fsdp", "single")


def make_strategy(name: str | SingleDevice, *, cpu: bool = False, group_options: dict[str, Any] | None = None,
                  ddp_options: dict[str, Any] | None = None) -> SingleDevice:
    """Builds the strategy for ``Accelerator(strategy=name)``: a name, or a configured strategy object.

    ``"auto"`` is DDP when a launcher started more than one process (or a group with several processes already
    exists), else one device. ``"ddp"`` in a single process is one device too (there is nothing to wrap).
    ``group_options`` (``timeout``, ``backend``) go to any distributed strategy built here, ``ddp_options``
    (``DistributedDataParallel`` arguments, ``comm_hook``) to a DDP one.
    """
    if isinstance(name, SingleDevice):
        name.setup_environment(cpu)
        return name
    if not isinstance(name, str) or name.lower() not in STRATEGY_CHOICES:
        raise ValueError(
            f"Accelerator(strategy={name!r}) is not a strategy. Expected one of: "
            + ", ".join(repr(c) for c in STRATEGY_CHOICES) + ", or a strategy object such as DDPStrategy(...) or "
            "FSDPStrategy(...)."
        )
    name = name.lower()
    many = launched_world_size() > 1 or (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    strategy: SingleDevice
    if name == "fsdp":
        strategy = FSDPStrategy(**(group_options or {}))
    elif name == "ddp" and not many and not dist.is_initialized():
        strategy = SingleDevice()  # "ddp" in one process: nothing to wrap
    elif name == "ddp" or (name == "auto" and many):
        strategy = DDPStrategy(**(group_options or {}), **(ddp_options or {}))
    else:
        strategy = SingleDevice()
    strategy.setup_environment(cpu)
    return strategy
