"""A minimal stand-in for the Trainer, for unit tests of callback logic that needs no training loop.

It has the Trainer attributes callbacks read and a ``save_checkpoint`` that writes a real (tiny) folder
holding the callbacks' states as JSON, so file-level behaviour (names, rotation, ``last``) is observable.
Integration tests with the real Trainer live beside these tests.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import torch


class FakeAccelerator:
    num_processes = 1
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.saved_models: list[str] = []

    def wait_for_everyone(self) -> None:
        pass

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor

    def save_model(self, model: Any, save_directory: str) -> None:
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, "model.safetensors"), "w") as f:
            f.write("weights")
        self.saved_models.append(save_directory)


class FakeModule(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(1, 1)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


class FakeTrainer(SimpleNamespace):
    def __init__(self, root: str, callbacks: list[Any] = (), **kw: Any) -> None:
        super().__init__(
            default_root_dir=root, global_step=0, current_epoch=0, callback_metrics={}, progress_bar_metrics={},
            should_stop=False, is_global_zero=True, num_training_batches=4, num_val_batches=[], loggers=[],
            optimizers=[], lr_scheduler_configs=[], log_every_n_steps=1, accelerator=FakeAccelerator(),
            module=FakeModule(), callbacks=list(callbacks), checkpoint_callback=None, saves=[],
            training=True, validating=False,
            # The Trainer's published facts of the fit in progress (a test that simulates a fit sets them).
            fitting=False, window_closed=True, epoch_finished=True, validation_count=0,
        )
        for key, value in kw.items():
            setattr(self, key, value)

    def save_checkpoint(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        states = {cb.state_key: _jsonable(cb.state_dict()) for cb in self.callbacks}
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump({"global_step": self.global_step, "callbacks": states}, f)
        self.saves.append(os.path.basename(path))

    def call(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, self.module, *args)


def read_state(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
