"""``ckpt_path="last"`` resumes the run that was interrupted, even when the folder holds an earlier run's
checkpoints with more steps.

Found by running ``examples/custom_callback.py`` on a GPU in a checkout where it had run before on CPU: the crashed
run (last save at step 12) "resumed" from the earlier run's ``epoch=2-step=24``, i.e. did nothing and kept weights
from another machine. On CPU the two runs were identical, so it went unnoticed.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Callback, ModelCheckpoint, Trainer, TrainingModule
from stoker.accelerator import STATE_NAME, CheckpointError, checkpoint_written, read_state


class Regressor(TrainingModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.lr = lr

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class CrashAfter(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"crash after step {self.step}")


def fit(root: Path, lr: float, crash_after: int | None = None, ckpt_path: str | None = None) -> Regressor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=True)
    module = Regressor(lr)
    callbacks: list[Callback] = [ModelCheckpoint(every_n_train_steps=3, save_last=True)]
    if crash_after is not None:
        callbacks.append(CrashAfter(crash_after))
    trainer = Trainer(max_epochs=2, default_root_dir=str(root), seed=0, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, callbacks=callbacks)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return module


def test_a_crashed_run_resumes_itself_not_an_earlier_run_with_more_steps(tmp_path: Path) -> None:
    root = tmp_path / "run"
    fit(root, lr=0.5)  # an earlier run in the same folder: 16 steps, other weights (another learning rate)
    reference = fit(tmp_path / "reference", lr=0.05)
    with pytest.raises(RuntimeError, match="crash after step 10"), pytest.warns(UserWarning, match="earlier run"):
        fit(root, lr=0.05, crash_after=10)  # a fresh run into the same folder; its last save is at step 9
    last = Trainer(default_root_dir=str(root), logger=False).find_last_checkpoint()
    assert last is not None and checkpoint_written(last)[0] == 9, last
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*earlier run")  # resuming is not a fresh run: no warning
        resumed = fit(root, lr=0.05, ckpt_path="last")
    for a, b in zip(resumed.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_each_save_records_its_time_and_the_state_file_checks_it(tmp_path: Path) -> None:
    fit(tmp_path, lr=0.05)
    folder = tmp_path / "checkpoints" / "last.ckpt"
    step, saved_at = checkpoint_written(folder)
    assert step == 16 and isinstance(saved_at, float) and saved_at <= os.path.getmtime(folder / STATE_NAME) + 1
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    state = json.loads((copy / STATE_NAME).read_text())
    for bad in ("yesterday", -1.0, True, float("inf")):
        (copy / STATE_NAME).write_text(json.dumps({**state, "saved_at": bad}))
        with pytest.raises(CheckpointError, match="saved_at"):
            read_state(str(copy))
    legacy = {k: v for k, v in state.items() if k != "saved_at"}  # written before the time was recorded
    (copy / STATE_NAME).write_text(json.dumps(legacy))
    assert read_state(str(copy)) == legacy


class StepAtTrainStart(Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.steps.append(trainer.global_step)


def test_last_is_looked_up_once_and_every_part_of_the_resume_reads_that_checkpoint(tmp_path: Path) -> None:
    """A fit resolves ``ckpt_path`` once: the callbacks' states, the train loader's request and the loop's position
    all come from the checkpoint found then, even when a newer one appears while the fit sets up (here the lookup
    answers differently the second time, as it would after another save)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)

    def trainer(cls: type = Trainer, **kwargs: Any) -> Any:
        return cls(max_epochs=2, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                   enable_model_summary=False, **kwargs)

    with pytest.raises(RuntimeError, match="crash after step 10"):
        trainer(callbacks=[ModelCheckpoint(every_n_train_steps=3, save_top_k=-1), CrashAfter(10)]).fit(
            Regressor(0.05), loader)
    older, newer = (str(tmp_path / "checkpoints" / f"epoch={e}-step={s}.ckpt") for e, s in ((0, 3), (1, 9)))
    assert checkpoint_written(older)[0] == 3 and checkpoint_written(newer)[0] == 9

    class NewerOnSecondLook(Trainer):
        looks = 0

        def find_last_checkpoint(self) -> str | None:
            self.looks += 1
            return older if self.looks == 1 else newer

    record = StepAtTrainStart()
    resumed = trainer(NewerOnSecondLook, callbacks=[ModelCheckpoint(every_n_train_steps=3, save_top_k=-1), record])
    resumed.fit(Regressor(0.05), loader, ckpt_path="last")
    assert resumed.looks == 1 and record.steps == [3] and resumed.ckpt_path == older
