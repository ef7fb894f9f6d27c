"""A minimal stand-in for the Trainer, for unit tests of callback logic that needs no training loop.

``FakeTrainer`` carries only names the real Trainer publishes (its public attributes and properties, the facts
``fitting``/``window_closed``/``epoch_finished``/``validation_count`` included), so a callback that passes here
reads nothing a real fit would not give it; setting any other name fails. The one addition is ``saves``: the
folder names ``save_checkpoint`` was called with, which the tests read (no callback does). Where a real Trainer
publishes a derived value (``checkpoint_callback``), the fake derives it the same way.

``save_checkpoint`` writes a real (tiny) folder holding the callbacks' states as JSON, so file-level behaviour
(names, rotation, ``last``) is observable. Integration tests with the real Trainer live beside these tests.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from typing import Any

import torch

from stoker import ModelCheckpoint, Trainer, TrainingModule
from stoker.accelerator import Accelerator
from stoker.accelerator.checkpointing.contents import StateHooks
from stoker.trainer.stages import StageRecord
from stoker.callbacks.hparams_file import write_hparams
from stoker.trainer.overrides import defines_hook

RECORDS = frozenset({"saves"})  # what the fake records for the tests; not a Trainer name


@functools.cache
def published_names() -> frozenset[str]:
    """The public names of a real Trainer instance: its attributes, properties and methods."""
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(default_root_dir=root, logger=False, enable_progress_bar=False)
        return frozenset(n for n in dir(trainer) if not n.startswith("_"))


class FakeStrategy:
    """One process: every agreement is the process's own value."""

    def any_process(self, flag: bool) -> bool:
        return bool(flag)


class FakeAccelerator:
    """The Accelerator's face as the callbacks see it in one CPU process."""

    num_processes = 1
    device = torch.device("cpu")
    strategy = FakeStrategy()
    is_main_process = True
    # The checkpoint-folder methods are the engine's own (they need only these few facts of the Accelerator).
    _checkpoint_io = None
    checkpoint_io = Accelerator.checkpoint_io
    wait_for_checkpoints = Accelerator.wait_for_checkpoints
    copy_checkpoint = Accelerator.copy_checkpoint
    remove_checkpoint = Accelerator.remove_checkpoint
    after_checkpoint = Accelerator.after_checkpoint
    sweep_checkpoint_trash = Accelerator.sweep_checkpoint_trash
    checkpoints_in_background = Accelerator.checkpoints_in_background
    save_model_folder = Accelerator.save_model_folder
    hold_checkpoint_folder = Accelerator.hold_checkpoint_folder
    release_checkpoint_folders = Accelerator.release_checkpoint_folders

    def __init__(self) -> None:
        self.checkpoint_hooks = StateHooks()  # register_*_state_pre_hook's tables (one per Accelerator)

    def wait_for_everyone(self) -> None:
        pass

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor

    def save_model(self, model: Any, save_directory: str) -> None:
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, "model.safetensors"), "w") as f:
            f.write("weights")


class FakeModule(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(1, 1)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


class FakeTrainer:
    """A Trainer-shaped object in the state of a fit's first epoch; keyword arguments replace the defaults.

    Example:
        >>> trainer = FakeTrainer(str(tmp_path), callbacks=[cb], num_val_batches=[2])
        >>> trainer.global_step += 2  # a test moves the run along by hand
    """

    def __init__(self, root: str, callbacks: list[Any] = (), **published: Any) -> None:
        self.saves: list[str] = []
        self.default_root_dir = root
        self.callbacks = list(callbacks)
        self.global_step = self.current_epoch = 0
        self.callback_metrics: dict[str, Any] = {}
        self.progress_bar_metrics: dict[str, Any] = {}
        self.should_stop, self.is_global_zero = False, True
        self.num_training_batches, self.num_val_batches = 4, []
        self.loggers, self.optimizers, self.lr_scheduler_configs = [], [], []
        self.log_every_n_steps, self.max_steps, self.accumulate = 1, None, 1
        self.accelerator, self.module = FakeAccelerator(), FakeModule()
        self.training, self.validating = True, False
        # The Trainer's published facts of the fit in progress (a test that simulates a fit sets them).
        self.fitting, self.window_closed, self.epoch_finished, self.validation_count = False, True, True, 0
        self.sanity_checking = False
        self.dry_run = False  # not a fast_dev_run
        self.val_check_interval, self.check_val_every_n_epoch = 1.0, 1  # validation once per epoch, at its end
        self.num_test_batches: list[int | float] = []
        self.num_predict_batches: list[int | float] = []
        for key, value in published.items():
            setattr(self, key, value)

    @property
    def stage_record(self) -> StageRecord:  # each loader here is one DataLoader: its batches are num_*_batches'
        return StageRecord({"validate": self.num_val_batches, "test": self.num_test_batches,
                            "predict": self.num_predict_batches})

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in RECORDS and name not in published_names():
            raise AttributeError(f"FakeTrainer.{name}: the real Trainer publishes no {name!r}, so a callback must "
                                 f"not read it. Give the fake only names of the Trainer's public surface.")
        object.__setattr__(self, name, value)

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        """The first ``ModelCheckpoint`` among the callbacks, or None (as the Trainer's)."""
        return next((c for c in self.callbacks if isinstance(c, ModelCheckpoint)), None)

    def module_defines(self, name: str, module: Any = None) -> bool:
        """The Trainer's test of "the module defines hook ``name``" (the one rule, ``defines_hook``)."""
        module = self.module if module is None else module
        return module is not None and defines_hook(module, name, TrainingModule)

    def save_checkpoint(self, path: str, weights_only: bool = False) -> str:
        if weights_only:  # as the Trainer's: the module's weights and hparams.json, complete or not at all
            module = self.module
            self.accelerator.save_model_folder(module, path, extra=lambda folder: write_hparams(module, folder))
            return path
        os.makedirs(path, exist_ok=True)
        states = {cb.state_key: _jsonable(cb.state_dict()) for cb in self.callbacks}
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump({"global_step": self.global_step, "callbacks": states}, f)
        self.saves.append(os.path.basename(path))
        return path


def read_state(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
