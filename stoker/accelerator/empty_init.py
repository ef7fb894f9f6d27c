"""Building a model without allocating its weights: ``init_empty_weights()`` / ``init_on_device(device)``.

Under ``init_on_device(device)`` every parameter a module registers is moved to ``device`` as it is registered;
with ``include_buffers=True`` every tensor made by a factory (``torch.empty``, ``zeros``, ``arange``, ...) is made
there too (torch's own ``with torch.device(...)``), buffers included. ``init_empty_weights()`` is the same on the
``"meta"`` device: shapes and dtypes, no data, no memory. Buffers stay on the CPU by default, with their values
(position ids, running statistics), as in Accelerate.

A model on the meta device holds no numbers to train or move: give it storage and load weights before
``Accelerator.prepare`` (which refuses it)::

    with init_empty_weights():
        model = Net()
    model.load_state_dict(torch.load("weights.pt"), assign=True)  # the loaded tensors become the parameters
    # or: model.to_empty(device="cpu") (uninitialised memory), then model.load_state_dict(state)

The parameters are moved while the block runs by wrapping ``nn.Module.register_parameter`` (a process-wide patch,
undone on exit; the only hook torch gives for "a parameter was registered"). Each parameter is still created on the
CPU first (and freed at once), as in Accelerate; a single tensor larger than memory needs ``include_buffers=True``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["init_empty_weights", "init_on_device", "meta_tensor_names"]


def _moved(param: nn.Parameter, device: torch.device) -> nn.Parameter:
    """``param`` on ``device``, of the same class, with the same ``requires_grad`` and attributes."""
    try:
        moved = type(param)(param.detach().to(device), requires_grad=param.requires_grad)
    except TypeError:  # a Parameter subclass with another constructor
        moved = nn.Parameter(param.detach().to(device), requires_grad=param.requires_grad)
    moved.__dict__.update(param.__dict__)  # e.g. transformers' _is_hf_initialized
    return moved


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters registered inside the block are put on ``device`` (buffers too with ``include_buffers=True``).

    Example:
        >>> with init_on_device("meta"):
        ...     layer = nn.Linear(4, 2)
        >>> layer.weight.device.type
        'meta'
    """
    device = torch.device(device)
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device != device:
            param = _moved(param, device)
        original(module, name, param)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    try:
        with device if include_buffers else contextlib.nullcontext():
            yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters registered inside the block are on the meta device: no memory, no data (buffers too with
    ``include_buffers=True``; by default they stay on the CPU with their values).

    Example:
        >>> with init_empty_weights():
        ...     big = nn.Sequential(*[nn.Linear(10_000, 10_000) for _ in range(100)])  # 40 GB in fp32: no memory
        >>> big[0].weight.is_meta
        True
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


def meta_tensor_names(module: nn.Module) -> list[str]:
    """The names of ``module``'s parameters and buffers on the meta device (built under :func:`init_empty_weights`
    and not loaded yet)."""
    tensors = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    return [name for name, tensor in tensors if tensor.is_meta]
