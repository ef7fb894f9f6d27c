"""Snapshots and exact comparisons of a model's weights, for the parity and resume tests.

A snapshot is detached and cloned, so later training does not change it: ``params_of`` (the parameters, in order),
``grads_of`` (their gradients), ``state_of`` (the state dict, buffers included) and ``flat`` (one list of floats,
for a worker's JSON result). ``assert_same_weights`` compares two models or snapshots bit for bit.

Example:
    >>> before = params_of(model)
    >>> trainer.fit(model, loader)
    >>> assert_same_weights(state_of(model), state_of(reference), "after one epoch")
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import nn

Weights = Union[nn.Module, dict[str, torch.Tensor], list[torch.Tensor]]


def params_of(model: nn.Module) -> list[torch.Tensor]:
    """Detached copies of the parameters, to compare before/after or against another model."""
    return [p.detach().clone() for p in model.parameters()]


def grads_of(model: nn.Module) -> list[torch.Tensor | None]:
    """Detached copies of the gradients (None where a parameter has no gradient)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the state dict (parameters and buffers, by name)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def flat(model: nn.Module) -> list[float]:
    """All parameters of ``model`` as one flat list (full tensors, also for FSDP's DTensors)."""
    out: list[float] = []
    for p in model.parameters():
        t = p.detach()
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        out.extend(t.float().reshape(-1).tolist())
    return out


def _named(weights: Weights) -> dict[str, Any]:
    if isinstance(weights, nn.Module):
        return weights.state_dict()
    if isinstance(weights, dict):
        return weights
    return {str(i): t for i, t in enumerate(weights)}


def assert_same_weights(got: Weights, want: Weights, context: str = "") -> None:
    """Fails unless ``got`` and ``want`` hold the same names in the same order and bit-identical tensors (same
    dtype and shape; rtol=0, atol=0). Each may be a module (its state dict), a state dict or a list of tensors.
    ``context`` starts the message of a failure, which also names the first tensor that differs."""
    a, b = _named(got), _named(want)
    assert list(a) == list(b), f"{context}: names differ: {list(a)} != {list(b)}"
    for key in b:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=lambda m: f"{context}: {key}: {m}")
