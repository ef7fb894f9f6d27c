"""``grad_norm``: each parameter's gradient norm and their overall norm, as tensors to log (``self.log_dict``).

The norms stay on the gradients' device: computing them reads nothing back to the host, so calling this in
``on_before_optimizer_step`` costs no synchronisation; the logger reads the values when it writes them.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

__all__ = ["grad_norm"]


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """The ``norm_type``-norm of each parameter's gradient (``grad_2.0_norm/layer.weight``) and of all of them as one
    vector (``grad_2.0_norm_total``); parameters without a gradient are left out (an empty dict if none has one).

    Args:
        module: The module whose parameters' gradients are measured.
        norm_type: A positive number, or ``"inf"`` for the largest absolute value.
        group_separator: Between the prefix and the parameter's name (a logger groups the names by it).

    Raises:
        ValueError: ``norm_type`` is not a positive number or ``"inf"``.

    Example:
        >>> def on_before_optimizer_step(self, optimizer):  # in a TrainingModule
        ...     self.log_dict(grad_norm(self, norm_type=2))
    """
    try:
        norm = float(norm_type)
    except (TypeError, ValueError):
        norm = float("nan")
    if not norm > 0:
        raise ValueError(f"grad_norm(norm_type={norm_type!r}): `norm_type` must be a positive number or 'inf' "
                         "(infinity norm).")
    norms = {f"grad_{norm}_norm{group_separator}{name}": torch.linalg.vector_norm(p.grad.detach(), norm)
             for name, p in module.named_parameters() if p.grad is not None}
    if norms:
        # the widest dtype of them, so that a float64 gradient's norm does not overflow in float32
        dtype = functools.reduce(torch.promote_types, (n.dtype for n in norms.values()))
        device = next(iter(norms.values())).device
        every = torch.stack([n.to(device, dtype) for n in norms.values()])
        norms[f"grad_{norm}_norm_total"] = torch.linalg.vector_norm(every, norm)
    return norms
