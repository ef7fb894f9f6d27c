"""Who is called first for each hook: the callbacks before the module, with two exceptions (the module reads a
loaded checkpoint first; checkpointing and early stopping run after the module at a training epoch's end)."""

from __future__ import annotations

from typing import Any

import torch

from stoker import Callback, Trainer
from stoker.callbacks import EarlyStopping, ModelCheckpoint
from stoker.trainer.profilers import SimpleProfiler
from tests.helpers.models import Regressor, make_loader, make_regression_data


class Plain(Callback):
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("plain")

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        self.calls.append("plain:load")

    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        self.calls.append(f"plain:setup:{stage}")


class Saver(ModelCheckpoint):
    def __init__(self, calls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = calls

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        # the value the module logged in this same hook is already among the trainer's metrics
        self.calls.append(f"saver sees {float(trainer.callback_metrics['late']):g}")
        super().on_train_epoch_end(trainer, module)


class Stopper(EarlyStopping):
    def __init__(self, calls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = calls

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("stopper")
        super().on_train_epoch_end(trainer, module)


class LogsAtEpochEnd(Regressor):
    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def on_train_epoch_end(self) -> None:
        self.calls.append("module")
        self.log("late", float(self.current_epoch + 7))

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append("module:load")

    def setup(self, stage: str) -> None:
        self.calls.append(f"module:setup:{stage}")


def fit(tmp_path: Any, calls: list[str], epochs: int = 1, ckpt_path: str | None = None, **kwargs: Any) -> Trainer:
    callbacks = [Saver(calls, monitor="late", save_on_train_epoch_end=True), Stopper(calls, monitor="late",
                 check_on_train_epoch_end=True, patience=5), Plain(calls)]
    trainer = Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                      callbacks=callbacks, **kwargs)
    trainer.fit(LogsAtEpochEnd(calls), make_loader(make_regression_data(n=16)), ckpt_path=ckpt_path)
    return trainer


def test_monitoring_callbacks_run_after_the_module_at_the_epoch_end_and_see_its_values(tmp_path: Any) -> None:
    calls: list[str] = []
    fit(tmp_path, calls)
    # the plain callback is listed last but runs first; the two monitors run after the module in the Trainer's
    # order, where the checkpoint callback goes last (as in Lightning)
    assert calls == ["plain:setup:fit", "module:setup:fit", "plain", "module", "stopper", "saver sees 7"]


def test_the_split_holds_with_a_profiler(tmp_path: Any) -> None:
    calls: list[str] = []
    fit(tmp_path, calls, profiler=SimpleProfiler())
    assert calls[2:] == ["plain", "module", "stopper", "saver sees 7"]


def test_a_loaded_checkpoint_reaches_the_module_before_the_callbacks(tmp_path: Any) -> None:
    first: list[str] = []
    trainer = fit(tmp_path / "a", first)
    path = trainer.checkpoint_callback.best_model_path
    calls: list[str] = []
    fit(tmp_path / "b", calls, epochs=2, ckpt_path=path)
    assert calls[:4] == ["plain:setup:fit", "module:setup:fit", "module:load", "plain:load"]
    assert calls[4:7] == ["plain", "module", "stopper"] and calls[7].startswith("saver sees") and len(calls) == 8


class BuildsHead(Regressor):
    """Builds a layer in configure_model (not in __init__), and records the loading hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.head: torch.nn.Module | None = None
        self.calls: list[str] = []

    def configure_model(self) -> None:
        self.calls.append("configure_model")
        if self.head is None:
            self.head = torch.nn.Linear(2, 2)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append("on_load_checkpoint")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(super().forward(x))


def test_load_from_checkpoint_builds_the_model_before_its_weights_load(tmp_path: Any) -> None:
    module = BuildsHead()
    trainer = Trainer(max_epochs=1, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                      enable_checkpointing=False)
    trainer.fit(module, make_loader(make_regression_data(n=16)))
    path = trainer.save_checkpoint(str(tmp_path / "saved"))
    loaded = BuildsHead.load_from_checkpoint(path)
    assert loaded.calls == ["configure_model", "on_load_checkpoint"]
    assert torch.equal(loaded.head.weight, module.head.weight)
