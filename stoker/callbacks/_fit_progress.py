"""What callbacks need to know about the fit in progress beyond the Trainer's published facts.

The Trainer publishes ``fitting``, ``window_closed``, ``epoch_finished`` and ``validation_count``; callbacks read
those. This module owns the two questions left: does this fit validate at all (validation batches and a module
that defines ``validation_step``, by the Trainer's ``module_defines``), and what value do all processes agree on?
Decisions that change the run (stop, save) must be the same on every process, or one process waits forever in a
collective the others never enter; the agreement itself is the engine's (``accelerator.reduce``, the strategy's
``any_process``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from stoker.callbacks.base import TrainerView


def agreed_mean(trainer: TrainerView, value: float) -> float:
    """``value`` averaged over the processes (one small all-reduce; nothing in a single process).

    Call it at the same point on every process. A NaN anywhere gives NaN everywhere.
    """
    accelerator = trainer.accelerator
    if accelerator.num_processes == 1:
        return value
    tensor = torch.tensor(float(value), dtype=torch.float64, device=accelerator.device)
    return float(accelerator.reduce(tensor, "mean").item())


def monitored_value(value: Any, owner: str) -> float:
    """A monitored metric as a float (one device-to-host read for a tensor); ``owner`` names the callback."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{owner} needs a scalar metric; got a tensor of shape {tuple(value.shape)}.")
        return float(value.detach().double().item())
    return float(value)


def no_metric_message(owner: str, monitor: str, metrics: Any, fix: str) -> str:
    """What a callback says when ``monitor`` is not among the logged ``metrics``: the names there are, and ``fix``."""
    return (f"{owner} found no metric {monitor!r}. Available metrics: {sorted(metrics) or 'none'}. "
            f"Log it with self.log({monitor!r}, value){fix}")


def agreed_any(trainer: TrainerView, flag: bool) -> bool:
    """True on every process when ``flag`` is True on any of them."""
    return trainer.accelerator.strategy.any_process(flag)


def fit_validates(trainer: TrainerView) -> bool:
    """True when the fit has validation batches and a module whose class defines ``validation_step``."""
    if not any(trainer.num_val_batches):
        return False
    return trainer.module is None or trainer.module_defines("validation_step")
