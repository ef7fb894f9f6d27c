"""What a ``TrainingModule`` says about where it runs, under Lightning's names: ``dtype``, ``on_gpu``, and
``all_gather`` (every process's tensors, through the run's strategy).

A mixin of ``TrainingModule`` (``module.py``), kept apart so that each file stays one idea.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..accelerator import gather_stacked


def _as_tensors(data: Any, device: torch.device) -> Any:
    """``data`` with its numbers made tensors and every tensor on ``device`` (Lightning's rule for all_gather)."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, (bool, int, float)):
        return torch.tensor(data, device=device)
    if isinstance(data, Mapping):
        return {key: _as_tensors(value, device) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_as_tensors(value, device) for value in data) if type(data) in (list, tuple) \
            else type(data)(*(_as_tensors(value, device) for value in data))  # a namedtuple
    return data


class RuntimeFacts:
    """``dtype``, ``on_gpu`` and ``all_gather`` of ``TrainingModule``."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the module's floating-point parameters (the first one's), else torch's default dtype."""
        first = next((p for p in self.parameters() if p.is_floating_point()), None)  # type: ignore[attr-defined]
        return first.dtype if first is not None else torch.get_default_dtype()

    @property
    def on_gpu(self) -> bool:
        """Whether the module runs on a CUDA device."""
        return self.device.type == "cuda"  # type: ignore[attr-defined]

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every process's ``data`` (a tensor, a number, or a dict / list / tuple of them): each tensor stacked along
        a new first dimension of length world size, so every process's tensor must have the same shape. In one
        process, ``data`` with its numbers made tensors. ``sync_grads=True`` keeps the gather in the autograd
        graph. Only the default group (all processes): another ``group`` is a ``ValueError``.

        Example:
            >>> losses = self.all_gather(loss)  # doctest: +SKIP
        """
        import torch.distributed as dist

        if group is not None and not (dist.is_available() and group is dist.group.WORLD):
            raise ValueError(f"{type(self).__name__}.all_gather(group={group!r}): stoker gathers over all the run's "
                             "processes. Pass group=None, or call torch.distributed.all_gather with your group.")
        data = _as_tensors(data, self.device)  # type: ignore[attr-defined]
        return gather_stacked(self.trainer.accelerator.strategy, data, sync_grads)  # type: ignore[attr-defined]
