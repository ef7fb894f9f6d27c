"""Process-level data helpers (gather, pad, split) written once over a strategy's primitive collectives."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from ..operations import apply_to_tensors

if TYPE_CHECKING:
    from .ddp import SingleDevice


def has_tensor(data: Any) -> bool:
    """True when ``data`` holds at least one tensor (anywhere in nested containers)."""
    found = []
    apply_to_tensors(lambda t: found.append(1) or t, data)
    return bool(found)


def gather(strategy: SingleDevice, data: Any) -> Any:
    """Concatenates each tensor of ``data`` from every process along dim 0 (scalars become 1-D)."""
    return apply_to_tensors(strategy.all_gather, data)  # one process: SingleDevice.all_gather is the identity


def gather_stacked(strategy: SingleDevice, data: Any, sync_grads: bool = False) -> Any:
    """Each tensor of ``data`` from every process, stacked along a new dim 0 of length ``num_processes`` (every
    process's tensor has the same shape); in one process, ``data`` as it is. ``sync_grads``: the gather is part of
    the autograd graph, so a loss computed from the result sends each process its tensor's gradient (summed over the
    processes)."""
    if strategy.num_processes == 1:
        return data

    def stacked(tensor: torch.Tensor) -> torch.Tensor:
        if sync_grads:
            from torch.distributed.nn.functional import all_gather

            return torch.stack(all_gather(tensor.contiguous()))
        return strategy.all_gather(tensor.unsqueeze(0))

    return apply_to_tensors(stacked, data)


def reduce(strategy: SingleDevice, data: Any, reduction: str = "sum") -> Any:
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduce(reduction={reduction!r}) expects 'sum', 'mean' or 'none'.")
    if reduction == "none" or strategy.num_processes == 1:
        return data
    return apply_to_tensors(lambda t: strategy.all_reduce(t, reduction), data)


def pad_across_processes(strategy: SingleDevice, data: Any, dim: int = 0, pad_index: int = 0,
                         pad_first: bool = False) -> Any:
    """Pads every tensor along ``dim`` to the largest size any process has, so that it can be gathered."""

    def pad(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or strategy.num_processes == 1:
            return t
        d = dim if dim >= 0 else t.dim() + dim
        size = torch.tensor([t.shape[d]], device=t.device)
        longest = int(strategy.all_reduce(size, "max").item())
        if longest == t.shape[d]:
            return t
        shape = list(t.shape)
        shape[d] = longest
        out = t.new_full(shape, pad_index)
        idx = [slice(None)] * t.dim()
        idx[d] = slice(longest - t.shape[d], longest) if pad_first else slice(0, t.shape[d])
        out[tuple(idx)] = t
        return out

    return apply_to_tensors(pad, data)


@contextlib.contextmanager
def split_between_processes(strategy: SingleDevice, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
    """Yields this process's contiguous share of a list, tuple, tensor or dict of them.

    Shares differ by at most one item; with ``apply_padding`` the shorter shares repeat their last item so every
    process gets the same count (gather, then drop the extras).
    """
    if not isinstance(inputs, (dict, list, tuple, torch.Tensor)):  # checked in one process too, so it fails early
        raise TypeError(
            f"split_between_processes takes a list, tuple, tensor or dict of those; got {type(inputs).__name__}. "
            "Convert it first, e.g. list(inputs)."
        )
    n, rank = strategy.num_processes, strategy.process_index
    if n == 1:
        yield inputs
        return

    def share(seq: Any) -> Any:
        length = len(seq)
        per, extra = divmod(length, n)
        start = rank * per + min(rank, extra)
        end = start + per + (1 if rank < extra else 0)
        part = seq[start:end]
        if apply_padding and extra and rank >= extra and length:
            last = seq[end - 1:end] if end > start else seq[-1:]
            part = torch.cat([part, last]) if isinstance(part, torch.Tensor) else part + type(part)(last)
        return part

    if isinstance(inputs, dict):
        yield {k: share(v) for k, v in inputs.items()}
    else:
        yield share(inputs)
