"""What ``training_step`` returns: the loss (and item count) read from it, and the errors for what cannot be
trained on. Shared by the automatic step (``loops.py``) and ``manual_backward`` (``manual.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def unpack_loss(outputs: Any) -> tuple[torch.Tensor, Any]:
    """``(loss, num_items)`` from what ``training_step`` returned; ``TypeError`` naming it for anything else."""
    num_items = None
    if isinstance(outputs, Mapping):
        if "loss" not in outputs:
            raise TypeError(f"training_step returned a dict without a 'loss' key (keys: {sorted(outputs)}). Return "
                            "{'loss': loss} or {'loss': summed_loss, 'num_items': n}.")
        loss, num_items = outputs["loss"], outputs.get("num_items")
    else:
        loss = outputs
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"training_step returned {type(loss).__name__} ({str(loss)[:60]}); it must return the loss "
                        "as a scalar tensor, or a dict with a 'loss' tensor. (Returning None to skip a batch is not "
                        "supported: filter the data instead.)")
    if loss.numel() != 1:
        raise TypeError(f"training_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar. Reduce "
                        "it, e.g. loss.mean() (or loss.sum() with 'num_items' for per-item normalisation).")
    return loss, num_items


def no_grad_error(loss: torch.Tensor) -> ValueError:
    """The error for a ``training_step`` loss that backward cannot differentiate."""
    reason = "gradients are disabled here (torch.no_grad() or torch.set_grad_enabled(False) around fit)" \
        if not torch.is_grad_enabled() else "it is not connected to any parameter that requires grad"
    return ValueError(
        f"training_step returned a loss that does not require grad (requires_grad=False, grad_fn=None): {reason}, "
        "so there is nothing to train. Return the loss computed from the model's output: not loss.detach(), "
        "loss.item() or torch.tensor(value), and not computed under torch.no_grad(); check that some parameters "
        "have requires_grad=True."
    )


def detached(outputs: Any) -> Any:
    """``training_step``'s dict as the ``on_train_batch_end`` hooks get it: its tensors detached from the graph
    (views of the same data: no copy, no device work); anything else as it is."""
    if isinstance(outputs, dict):
        return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}
    return outputs
