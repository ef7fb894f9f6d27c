"""The general helpers a script imports from Lightning's ``utilities`` package top level: silencing the
may-be-intended warnings, counting a model's FLOPs, moving a batch to a device and a worker count for loaders.

Each is stoker's own, on what stoker already has: the warning category of ``stoker.user_frame``, torch's
``FlopCounterMode``, the engine's ``send_to_device`` and the CPU count of the Trainer's loader warnings.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from stoker.user_frame import PossibleUserWarning

__all__ = ["disable_possible_user_warnings", "measure_flops", "move_data_to_device", "suggested_max_num_workers"]


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignores the warnings about settings that may be intended (``PossibleUserWarning``), from every module or from
    those whose name matches ``module`` (a regular expression, as ``warnings.filterwarnings`` takes it)."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """The floating-point operations of ``forward_fn()`` (a forward pass of ``model``), and of the backward pass of
    ``loss_fn(output)`` when given, counted by torch's ``FlopCounterMode``. Build the model and its input on the
    ``meta`` device to count without computing (e.g. for ``ThroughputMonitor``'s ``flops_per_batch``).

    Example:
        >>> with torch.device("meta"):
        ...     layer, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
        >>> measure_flops(layer, lambda: layer(x))
        48
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output = forward_fn()
        if loss_fn is not None:
            loss_fn(output).backward()
    return counter.get_total_flops()


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """``batch`` with every tensor, and every object that has a ``to`` method, on ``device`` (containers keep their
    types); copies to an accelerator do not block the host."""
    from stoker.accelerator import send_to_device

    target = torch.device(device)
    return send_to_device(batch, target, non_blocking=target.type not in ("cpu", "mps"))


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for a ``DataLoader``'s ``num_workers`` when ``local_world_size`` processes share this
    machine: its CPUs divided among them, one left to each process itself, at least 1."""
    from stoker.trainer.args import is_int
    from stoker.trainer.workers import available_cpus

    if not is_int(local_world_size):
        raise TypeError(f"suggested_max_num_workers(local_world_size={local_world_size!r}): expected an int, the "
                        "number of processes on this machine.")
    if local_world_size < 1:
        raise ValueError(f"suggested_max_num_workers(local_world_size={local_world_size}): expected the number of "
                         "processes on this machine, >= 1.")
    return max(1, available_cpus() // local_world_size - 1)
