"""What ``save_state`` / ``load_state`` work on: a plain description the Accelerator builds for each call.

Checkpoint I/O reads only this (never the Accelerator): the prepared objects in preparation order, the objects
that hold the step's state (precision: the grad scaler; window: the step counters and an open window), the
strategy (processes, collectives, sharded weights), the project settings (automatic naming, rotation), the user's
state hooks and the background writer.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .background import CheckpointIO


class StateHooks:
    """Functions run by ``save_state`` before it writes and by ``load_state`` before it reads the models.

    A save hook is called as ``hook(models, weights, output_dir)``: ``weights`` holds one state dict per model,
    and a hook that saves a model its own way removes that model's entry (then ``model_{i}`` numbers the rest).
    A load hook is called as ``hook(models, input_dir)`` and removes the models it loaded itself.
    """

    def __init__(self) -> None:
        self.save: OrderedDict[int, Callable] = OrderedDict()
        self.load: OrderedDict[int, Callable] = OrderedDict()

    def register(self, table: OrderedDict, hook: Callable, name: str) -> Any:
        from torch.utils.hooks import RemovableHandle

        if not callable(hook):
            raise TypeError(f"{name}(hook) needs a callable, got {type(hook).__name__}.")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    def run_save(self, models: list[torch.nn.Module], weights: list[dict], output_dir: str) -> None:
        """Runs the save hooks; ``output_dir`` is the checkpoint's temporary folder (renamed when complete)."""
        for hook in list(self.save.values()):
            hook(models, weights, output_dir)
        folders = [n for n in os.listdir(output_dir) if os.path.isdir(os.path.join(output_dir, n))] if self.save else []
        if folders:
            raise ValueError(
                f"A save_state pre-hook created the folder(s) {folders} in the checkpoint; stoker checkpoints hold "
                "files only (each is listed and checksummed in the manifest). Write files into output_dir, e.g. "
                "model.save_pretrained(output_dir) or torch.save(..., os.path.join(output_dir, 'extra.pt'))."
            )

    def run_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        for hook in list(self.load.values()):
            hook(models, input_dir)

    def __getstate__(self) -> dict[str, Any]:
        return {"save": OrderedDict(), "load": OrderedDict()}  # hooks are often closures: not carried by pickle


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
