"""What ``save_state`` / ``load_state`` work on: a plain description the Accelerator builds for each call.

Checkpoint I/O reads only this (never the Accelerator): the prepared objects in preparation order, the objects
that hold the step's state (precision: the grad scaler; window: the step counters and an open window), the
strategy (processes, collectives, sharded weights), the project settings (automatic naming, rotation), the user's
state hooks and the background writer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .background import CheckpointIO


@dataclass
class CheckpointContents:
    """Everything a checkpoint holds or needs, named.

    Args:
        models: Prepared models (possibly wrapped), in preparation order.
        optimizers: Prepared optimizers, in preparation order.
        schedulers: Prepared schedulers, in preparation order.
        dataloaders: Prepared data loaders, in preparation order.
        custom_objects: ``register_for_checkpointing`` objects, in registration order.
        precision: The precision object (its ``state_dict`` is the grad scaler's).
        window: The gradient window (step counters, an open window's summed-loss state).
        strategy: The strategy: process index/count, barrier, broadcast, full and sharded model state.
        project: The ``ProjectConfiguration`` (automatic naming, ``total_limit``, the ``iteration`` counter).
        hooks: The ``register_save/load_state_pre_hook`` hooks (``run_save`` / ``run_load``).
        io: The background writer/deleter of this Accelerator.
        stateful_loaders: ``DataLoaderConfiguration(use_stateful_dataloader=...)``: loader positions are restored.
        unwrap: The user's module of a prepared model (wrappers removed).
    """

    models: list[torch.nn.Module]
    optimizers: list[Any]
    schedulers: list[Any]
    dataloaders: list[Any]
    custom_objects: list[Any]
    precision: Any
    window: Any
    strategy: Any
    project: Any
    hooks: Any
    io: CheckpointIO
    stateful_loaders: bool
    unwrap: Callable[[torch.nn.Module], torch.nn.Module]

    @property
    def process_index(self) -> int:
        return self.strategy.process_index

    @property
    def num_processes(self) -> int:
        return self.strategy.num_processes

    @property
    def is_main_process(self) -> bool:
        return self.strategy.process_index == 0

    def count(self, kind: str) -> int:
        """How many objects of ``kind`` (``"models"``, ``"optimizers"``, ...) there are."""
        return len(getattr(self, kind))

    def counters(self) -> dict[str, int]:
        """The step counters a checkpoint records (and the automatic-naming iteration)."""
        return {**self.window.state_dict(), "iteration": self.project.iteration}

    def model_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """``model``'s full state dict (collective under a sharding strategy: every process calls it)."""
        return self.strategy.model_state_dict(self.unwrap(model))


def checkpointable(objects: tuple[Any, ...]) -> tuple[Any, ...]:
    """``objects`` when each has ``state_dict()`` and ``load_state_dict()`` (``register_for_checkpointing``)."""
    bad = [i for i, o in enumerate(objects) if not (callable(getattr(o, "state_dict", None))
                                                     and callable(getattr(o, "load_state_dict", None)))]
    if bad:
        names = ", ".join(f"#{i} ({type(objects[i]).__name__})" for i in bad)
        raise TypeError(
            f"register_for_checkpointing: object(s) {names} lack state_dict()/load_state_dict(); only objects "
            "with both methods can be saved and restored. Give the object both methods (state_dict() returning "
            "a dict, load_state_dict(dict) restoring it) or leave it out."
        )
    return objects
