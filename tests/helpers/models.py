"""Tiny models and generated data shared by the test suite.

Everything here is deterministic (seeded locally, never through the global RNG) and small enough that a test
runs in milliseconds on a CPU. Other test folders import these helpers: keep the names and defaults stable.

Example:
    >>> model = make_mlp(seed=0)
    >>> loader = make_loader(make_regression_data(n=32), batch_size=8)
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

IN_FEATURES = 8
OUT_FEATURES = 2


def make_mlp(in_features: int = IN_FEATURES, hidden: int = 16, out_features: int = OUT_FEATURES,
             seed: int = 0) -> nn.Sequential:
    """A two-layer MLP whose initial weights depend only on ``seed`` (the global RNG is left untouched)."""
    # fork_rng: building a model must not shift the random stream of the test that builds it.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, out_features))


class TinyRegressor(nn.Module):
    """An MLP behind a named module, so attribute access on a prepared model can be checked (``model.net``)."""

    def __init__(self, in_features: int = IN_FEATURES, out_features: int = OUT_FEATURES, seed: int = 0) -> None:
        super().__init__()
        self.net = make_mlp(in_features, 16, out_features, seed=seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def clone_model(model: nn.Module) -> nn.Module:
    """An independent copy with identical weights (for a raw loop to run beside the Accelerator)."""
    return copy.deepcopy(model)


def make_regression_data(n: int = 64, in_features: int = IN_FEATURES, out_features: int = OUT_FEATURES,
                         seed: int = 0) -> TensorDataset:
    """``n`` pairs ``(x, y)`` with ``y`` a fixed linear function of ``x`` plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=g)
    w = torch.randn(in_features, out_features, generator=g)
    y = x @ w + 0.1 * torch.randn(n, out_features, generator=g)
    return TensorDataset(x, y)


def make_loader(dataset: Dataset, batch_size: int = 8, shuffle: bool = False) -> DataLoader:
    """A plain ``DataLoader`` (no workers, so tests stay fast and deterministic)."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


def batches(dataset: TensorDataset, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The dataset cut in order into batches (the last may be short), without a DataLoader."""
    x, y = dataset.tensors
    return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]


def params_of(model: nn.Module) -> list[torch.Tensor]:
    """Detached copies of the parameters, to compare before/after or against another model."""
    return [p.detach().clone() for p in model.parameters()]


def grads_of(model: nn.Module) -> list[torch.Tensor | None]:
    """Detached copies of the gradients (None where a parameter has no gradient)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
