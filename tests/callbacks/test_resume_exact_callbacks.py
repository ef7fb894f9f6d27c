"""Stateful callbacks across an exact resume: a fit resumed from any checkpoint of an uninterrupted one (a step
checkpoint written at a batch's end, or one written at a validation's end) ends as that fit did, with the same
weights, the same callback states and the same values logged after the checkpoint."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.nn import functional as F

from stoker import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint
from stoker.callbacks import ThroughputMonitor
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import ListLogger
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import assert_same_weights


class TwoOptimizers(Regressor):
    """Manual optimization: the first layer's SGD steps every batch, the last layer's Adam every third."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        for index, (optimizer, scheduler) in enumerate(zip(self.optimizers(), self.lr_schedulers())):
            if index == 0 or batch_idx % 3 == 0:
                optimizer.zero_grad()
                self.manual_backward(F.mse_loss(self(x), y))
                optimizer.step()
                scheduler.step()

    def configure_optimizers(self) -> Any:
        first = torch.optim.SGD(self.net[0].parameters(), lr=0.05)
        last = torch.optim.Adam(self.net[-1].parameters(), lr=0.01)
        return [first, last], [torch.optim.lr_scheduler.StepLR(first, 2, 0.9),
                               torch.optim.lr_scheduler.StepLR(last, 1, 0.8)]


class Crash(Exception):
    """An interruption."""


class CrashInValidation(Callback):
    """Interrupts the fit when the validation after optimizer step ``step`` starts."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_validation_start(self, trainer: Any, module: Any) -> None:
        if trainer.global_step == self.step:
            raise Crash()


def fit(root: Any, module: Any, callbacks: list, ckpt_path: str | None = None, every: int = 3, **kw: Any) -> Any:
    """10 batches an epoch; step checkpoints in ``root/steps`` and, after each validation or epoch, in
    ``root/ends`` (all kept, named ``step=N.ckpt``)."""
    kw.setdefault("max_epochs", 3)
    saves = [ModelCheckpoint(dirpath=os.path.join(root, "steps"), filename="{step}", every_n_train_steps=every,
                             save_top_k=-1),
             ModelCheckpoint(dirpath=os.path.join(root, "ends"), filename="{step}", save_top_k=-1)]
    trainer = quiet_trainer(default_root_dir=str(root), enable_checkpointing=True, logger=ListLogger(),
                            callbacks=[*callbacks, *saves], **kw)
    torch.manual_seed(0)
    trainer.fit(module, make_loader(make_regression_data(n=40), batch_size=4),
                make_loader(make_regression_data(n=16, seed=1), batch_size=4), ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    return trainer


def logged(trainer: Any, prefix: str, after: int) -> list[tuple[int, dict[str, Any]]]:
    """The rows of values named ``prefix...`` logged at steps after ``after``."""
    rows = [(step, {k: v for k, v in values.items() if k.startswith(prefix)})
            for step, values in trainer.loggers[0].rows]
    return [(step, values) for step, values in rows if values and step > after]


@pytest.mark.parametrize("make, interval, kw, resume", [
    # logged at epoch starts: once an epoch, not again at a resume inside it
    (lambda: Regressor(scheduler="epoch"), None, {}, "steps/step=12.ckpt"),
    # every other step of each optimizer's own: the counts come back
    (TwoOptimizers, "step", {"log_every_n_steps": 2}, "steps/step=6.ckpt"),
], ids=["epoch-interval", "two-optimizers"])
def test_the_learning_rates_logged_after_a_resume_are_those_of_the_uninterrupted_fit(tmp_path, make, interval, kw,
                                                                                     resume):
    whole = fit(tmp_path / "whole", make(), [LearningRateMonitor(interval)], **kw)
    resumed = fit(tmp_path / "resumed", make(), [LearningRateMonitor(interval)],
                  ckpt_path=str(tmp_path / "whole" / resume), **kw)
    step = int(resume.split("=")[1].split(".")[0])
    assert logged(resumed, "lr-", step) == logged(whole, "lr-", step) != []
    assert len(logged(resumed, "lr-", -1)) == len(logged(whole, "lr-", step))  # nothing logged twice


@pytest.mark.parametrize("resume", [
    "steps/step=18.ckpt",  # written at the end of the batch whose validation came next: that validation still runs
    "ends/step=24.ckpt",  # written at the end of the validation that stopped the fit: the resumed fit stops at once
])
def test_early_stopping_stops_a_resumed_fit_where_it_stopped_the_uninterrupted_one(tmp_path, resume):
    def run(root: Any, ckpt_path: str | None = None) -> tuple[Any, Any, EarlyStopping]:
        module, stop = Regressor(lr=0.02), EarlyStopping("val/loss", patience=3, min_delta=0.3)
        trainer = fit(root, module, [stop], ckpt_path, max_epochs=8, val_check_interval=4)
        return trainer, module, stop

    whole, whole_module, whole_stop = run(tmp_path / "whole")
    assert whole.global_step == 24  # stopped mid-epoch, at the validation after batch 4 of epoch 2
    resumed, module, stop = run(tmp_path / "resumed", str(tmp_path / "whole" / resume))
    assert resumed.global_step == 24
    assert stop.state_dict() == whole_stop.state_dict()
    assert_same_weights(module, whole_module, f"resumed from {resume}")


def test_a_fit_resumed_from_a_step_checkpoint_validates_where_the_uninterrupted_one_did(tmp_path):
    # Validation every 4 batches counted across epochs: each of the step checkpoints (every 3 steps) is written
    # before the batch's validation, and the count of batches that decides the next ones must resume exactly.
    kw: dict[str, Any] = {"val_check_interval": 4, "check_val_every_n_epoch": None}
    whole = fit(tmp_path / "whole", Regressor(), [], every=4, **kw)
    for step in (4, 12, 24):
        path = str(tmp_path / "whole" / "steps" / f"step={step}.ckpt")
        resumed = fit(tmp_path / f"resumed{step}", Regressor(), [], path, every=4, **kw)
        assert logged(resumed, "val/", step - 1) == logged(whole, "val/", step - 1), step


def test_throughput_validation_totals_go_on_across_a_resume(tmp_path):
    whole_monitor, monitor = ThroughputMonitor(), ThroughputMonitor()
    fit(tmp_path / "whole", Regressor(), [whole_monitor])
    fit(tmp_path / "resumed", Regressor(), [monitor], str(tmp_path / "whole" / "ends" / "step=10.ckpt"))
    assert monitor.metrics["validate/batches"] == whole_monitor.metrics["validate/batches"] == 12  # 3 x 4 batches
    assert monitor.metrics["validate/samples"] == whole_monitor.metrics["validate/samples"] == 48


def test_top_k_by_steps_keeps_the_same_checkpoints_after_an_interrupted_validation(tmp_path):
    # Every 3 steps, before that step's validation: the value seen is the previous validation's, already ranked, so
    # the ranking waits for the validation. An interruption in that validation resumes from the step's `last`.
    def run(root: Any, callbacks: list, ckpt_path: str | None = None) -> ModelCheckpoint:
        best = ModelCheckpoint(dirpath=os.path.join(root, "best"), monitor="val/loss", every_n_train_steps=3,
                               save_top_k=2, filename="{step}-{val/loss:.4f}", save_last=True)
        try:
            fit(root, Regressor(lr=0.02), [best, *callbacks], ckpt_path, val_check_interval=3)
        except Crash:
            pass
        return best

    def kept(best: ModelCheckpoint) -> tuple[list[str], dict[str, float], str]:
        names = {os.path.basename(path): score for path, score in best.best_k_models.items()}
        return sorted(os.listdir(best.dirpath)), names, os.path.basename(best.best_model_path)

    whole = run(tmp_path / "whole", [])
    for step in (3, 6, 9):
        root = tmp_path / f"interrupted{step}"
        run(root, [CrashInValidation(step)])
        resumed = run(root, [], str(root / "best" / "last.ckpt"))
        assert kept(resumed) == kept(whole), step


@pytest.mark.parametrize("settings, stops", [
    ({"patience": 3, "min_delta": 0.3}, True),  # the same settings: the stop stands
    ({"patience": 5, "min_delta": 0.3}, False),  # a larger patience, asked for on purpose: trains on
    ({"patience": 2, "min_delta": 0.3}, True),  # a smaller one: stopped all the more
])
def test_a_restored_early_stop_stands_only_under_settings_that_still_decide_it(tmp_path, settings, stops):
    def run(root: Any, stop: EarlyStopping, ckpt_path: str | None = None) -> Any:
        return fit(root, Regressor(lr=0.02), [stop], ckpt_path, max_epochs=8, val_check_interval=4)

    whole_stop = EarlyStopping("val/loss", patience=3, min_delta=0.3)
    assert run(tmp_path / "whole", whole_stop).global_step == 24  # stopped by patience, a checkpoint written there
    stop = EarlyStopping("val/loss", **settings)
    resumed = run(tmp_path / "resumed", stop, str(tmp_path / "whole" / "ends" / "step=24.ckpt"))
    assert (resumed.global_step == 24) is stops
    if stops:
        assert stop.stopping_reason is whole_stop.stopping_reason
    else:  # it trained on, through the checks its own patience allows
        assert resumed.global_step > 24 and stop.wait_count >= 3


@pytest.mark.parametrize("threshold, stops", [(1e6, True), (1e-9, False), (None, False)])
def test_a_restored_threshold_stop_is_judged_with_the_threshold_of_the_resumed_fit(tmp_path, threshold, stops):
    whole_stop = EarlyStopping("val/loss", stopping_threshold=1e6, patience=100)
    whole = fit(tmp_path / "whole", Regressor(), [whole_stop], max_epochs=3, val_check_interval=4)
    at = whole.global_step
    assert at < 30 and whole_stop.stopping_reason.name == "STOPPING_THRESHOLD"
    stop = EarlyStopping("val/loss", stopping_threshold=threshold, patience=100)
    resumed = fit(tmp_path / "resumed", Regressor(), [stop], str(tmp_path / "whole" / "ends" / f"step={at}.ckpt"),
                  max_epochs=3, val_check_interval=4)
    assert (resumed.global_step == at) is stops
    assert resumed.global_step == at if stops else resumed.global_step == 30  # trained on to max_epochs
