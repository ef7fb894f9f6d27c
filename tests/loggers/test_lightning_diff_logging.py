"""``self.log`` where a Lightning script and stoker used to disagree (found by running the same script on both):
the hooks outside a training batch log epoch values only, and an evaluation's step values stay out of
``callback_metrics`` until its epoch ends."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import ListLogger


def _trainer(**kwargs: Any) -> Trainer:
    kwargs.setdefault("logger", ListLogger())
    kwargs.setdefault("max_epochs", 2)
    return Trainer(log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False,
                   enable_checkpointing=False, **kwargs)


def _data(n: int = 12) -> Any:
    return make_loader(make_regression_data(n=n), batch_size=4)


class LogsOutsideBatches(Regressor):
    """Logs ``start`` in on_train_start and ``epoch_start`` in on_train_epoch_start with the default options."""

    def on_train_start(self) -> None:
        self.log("start", 3.0)

    def on_train_epoch_start(self) -> None:
        self.log("epoch_start", float(self.current_epoch))


def test_values_logged_before_the_first_batch_are_epoch_values() -> None:
    logger = ListLogger()
    trainer = _trainer(logger=logger)
    trainer.fit(LogsOutsideBatches(), _data())
    # one point per epoch, at the epoch's end (3 steps an epoch), never a step value at the first step
    points = {name: [step for step, row in logger.rows if name in row] for name in ("start", "epoch_start")}
    assert points == {"start": [3], "epoch_start": [3, 6]}
    assert [row["epoch_start"] for _, row in logger.rows if "epoch_start" in row] == [0.0, 1.0]


@pytest.mark.parametrize("hook", ["on_train_start", "on_train_epoch_start", "on_train_epoch_end"])
def test_on_step_true_outside_a_training_batch_is_refused(hook: str) -> None:
    class StepOutsideBatch(Regressor):
        pass

    setattr(StepOutsideBatch, hook, lambda self: self.log("x", 1.0, on_step=True))
    with pytest.raises(ValueError, match=r"self.log\('x', on_step=True\) outside a batch"):
        _trainer().fit(StepOutsideBatch(), _data())


def test_on_step_true_in_the_batch_hooks_stays_allowed() -> None:
    class InBatchHooks(Regressor):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            self.log("before", float(batch_idx), on_step=True)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.log("after", float(batch_idx), on_step=True, on_epoch=True)

    logger = ListLogger()
    _trainer(logger=logger, max_epochs=1).fit(InBatchHooks(), _data())
    assert [row["before"] for _, row in logger.rows if "before" in row] == [0.0, 1.0, 2.0]
    assert [row["after_epoch"] for _, row in logger.rows if "after_epoch" in row] == [1.0]


class StepOnlyValidation(Regressor):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v_step_only", float(batch_idx + 1), on_step=True, on_epoch=False)
        self.log("v_both", float(batch_idx + 1), on_step=True, on_epoch=True)


def test_evaluation_step_values_reach_the_loggers_but_never_callback_metrics() -> None:
    seen: list[dict[str, float]] = []

    class Reads(Callback):
        def on_validation_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            seen.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("v_")})

    logger = ListLogger()
    trainer = _trainer(logger=logger, max_epochs=2, callbacks=[Reads()], num_sanity_val_steps=0)
    trainer.fit(StepOnlyValidation(), _data(), make_loader(make_regression_data(n=8), batch_size=4))
    # during the first validation nothing of it is a callback metric yet; during the second, the first's epoch mean
    assert seen == [{}, {}, {"v_both": 1.5, "v_both_epoch": 1.5}, {"v_both": 1.5, "v_both_epoch": 1.5}]
    assert "v_step_only" not in trainer.callback_metrics
    assert [row["v_step_only"] for _, row in logger.rows if "v_step_only" in row] == [1.0, 2.0, 1.0, 2.0]
    assert float(trainer.callback_metrics["v_both"]) == 1.5


def test_test_step_values_logged_per_step_only_are_not_in_the_returned_results() -> None:
    class StepOnlyTest(Regressor):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("t_step_only", torch.tensor(float(batch_idx)), on_step=True, on_epoch=False)
            self.log("t", float(batch_idx))

    trainer = _trainer()
    results = trainer.test(StepOnlyTest(), _data(8))
    assert results == [{"t": 0.5}]
    assert set(trainer.callback_metrics) == {"t"}


def test_an_evaluation_alone_logs_the_hyperparameters_and_its_step_values_carry_no_epoch_label(tmp_path) -> None:
    class StepValues(Regressor):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("t", float(batch_idx), on_step=True, on_epoch=True)

    calls: list[Any] = []

    class Records(ListLogger):
        def log_hyperparams(self, params: Any, *args: Any) -> None:
            calls.append(sorted(params))

    logger = Records()
    trainer = _trainer(logger=logger)
    trainer.test(StepValues(lr=0.5), _data(8))
    assert calls and "lr" in calls[0]  # a test-only run's loggers get the hyperparameters, as a fit's do
    assert logger.rows == [(0, {"t_step": 0.0}), (1, {"t_step": 1.0}), (0, {"t_epoch": 0.5, "epoch": 0})]
    trainer.test(StepValues(), _data(8))
    assert len(calls) == 2  # each run logs them (a logger may be new to this run)


class SameNameInStepsAndEpochEnd(Regressor):
    """``acc`` per batch (its epoch mean: 2.0, 12.0) and again in on_train_epoch_end (100.0, 101.0)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("acc", float(batch_idx + 1 + 10 * self.current_epoch), on_step=self.both, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        self.log("acc", 100.0 + self.current_epoch)


@pytest.mark.parametrize("both", [False, True])
def test_a_name_logged_again_at_the_epoch_end_replaces_the_batches_reduction(both: bool) -> None:
    logger = ListLogger()
    module = SameNameInStepsAndEpochEnd()
    module.both = both
    trainer = _trainer(logger=logger)
    trainer.fit(module, _data())
    # the epoch end's own value, not a mean of it and the batches' values
    assert [row["acc"] for _, row in logger.rows if "acc" in row] == [100.0, 101.0]
    assert float(trainer.callback_metrics["acc"]) == 101.0
    if both:  # the batches' epoch mean keeps its own name
        assert [row["acc_epoch"] for _, row in logger.rows if "acc_epoch" in row] == [2.0, 12.0]


def test_a_name_logged_at_the_epoch_start_and_in_the_batches_publishes_the_batches_mean() -> None:
    class StartAndSteps(Regressor):
        def on_train_epoch_start(self) -> None:
            self.log("n", 50.0)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("n", float(batch_idx), on_step=False, on_epoch=True)
            return super().training_step(batch, batch_idx)

    logger = ListLogger()
    _trainer(logger=logger, max_epochs=1).fit(StartAndSteps(), _data())
    assert [row["n"] for _, row in logger.rows if "n" in row] == [1.0]


def test_log_takes_lightnings_arguments_in_its_order_and_its_extra_options() -> None:
    class LightningStyle(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("shown", 1.0, True)  # prog_bar, positionally
            self.log("hidden", 2.0, False, False)  # prog_bar, logger
            self.log("main_only", 3.0, rank_zero_only=True, enable_graph=True)
            self.log("default_logger", 4.0, logger=None, sync_dist_group=None)
            self.log_dict({"d": 5.0}, True, None, True, True)  # prog_bar, logger, on_step, on_epoch
            return loss

    logger = ListLogger()
    trainer = _trainer(logger=logger, max_epochs=1)
    trainer.fit(LightningStyle(), _data())
    last_step = logger.rows[-2][1]  # the last step's values (the epoch's come last)
    assert {"shown", "main_only", "default_logger", "d_step"} <= set(last_step) and "hidden" not in last_step
    assert set(trainer.progress_bar_metrics) == {"shown", "d_step", "d_epoch"}
    assert float(trainer.callback_metrics["hidden"]) == 2.0


@pytest.mark.parametrize("options, words", [({"sync_dist_group": object()}, "sync_dist_group=None"),
                                            ({"sync_dist": True, "rank_zero_only": True}, "Drop one of them")])
def test_log_refuses_the_options_it_cannot_honour(options: dict[str, Any], words: str) -> None:
    class Refused(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("x", 1.0, **options)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=words):
        _trainer(max_epochs=1).fit(Refused(), _data())


def test_a_name_logged_in_validation_steps_and_at_the_validation_epoch_end_publishes_the_epoch_end_value() -> None:
    class ValidationEnd(Regressor):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", float(batch_idx))

        def on_validation_epoch_end(self) -> None:
            self.log("score", 100.0 + self.current_epoch)

    logger = ListLogger()
    trainer = _trainer(logger=logger)
    trainer.fit(ValidationEnd(), _data(), _data())
    assert [row["score"] for _, row in logger.rows if "score" in row] == [100.0, 101.0]
    assert float(trainer.callback_metrics["score"]) == 101.0


@pytest.mark.parametrize("hook", ["on_validation_epoch_start", "on_validation_epoch_end"])
def test_on_step_true_in_an_evaluation_epoch_hook_is_refused(hook: str) -> None:
    class StepOutsideBatches(Regressor):
        pass

    setattr(StepOutsideBatches, hook, lambda self: self.log("x", 1.0, on_step=True))
    with pytest.raises(ValueError, match="on_step=True"):
        _trainer(max_epochs=1).validate(StepOutsideBatches(), _data())
