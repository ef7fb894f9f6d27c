"""The module-only hooks around evaluation's mode switch (Lightning's ``on_{validation,test,predict}_model_eval`` /
``_train``): when they run, what their defaults do, and what an override decides."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


def loader(n: int = 16) -> Any:
    return make_loader(make_regression_data(n=n), batch_size=8)


def quiet(**kw: Any) -> Trainer:
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   seed=0, **kw)


class Recorder(Regressor):
    """Records the evaluation hooks in order and the dropout layer's mode in each step."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(dropout=0.5, **kw)
        self.calls: list[str] = []
        self.dropout_on: list[bool] = []

    def _record(self, name: str) -> None:
        self.calls.append(name)

    def on_validation_model_eval(self) -> None:
        self._record("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_start(self) -> None:
        self._record("on_validation_start")

    def on_validation_end(self) -> None:
        self._record("on_validation_end")

    def on_test_model_eval(self) -> None:
        self._record("on_test_model_eval")
        super().on_test_model_eval()

    def on_test_start(self) -> None:
        self._record("on_test_start")

    def on_test_end(self) -> None:
        self._record("on_test_end")

    def on_predict_model_eval(self) -> None:
        self._record("on_predict_model_eval")
        super().on_predict_model_eval()

    def on_predict_start(self) -> None:
        self._record("on_predict_start")

    def on_predict_end(self) -> None:
        self._record("on_predict_end")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.dropout_on.append(self.dropout.training)
        super().validation_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def test_the_eval_hook_runs_before_the_stage_and_modes_come_back_after_it() -> None:
    module = Recorder()
    module.net[0].eval()  # a frozen layer: the default restores each sub-module's own mode, not train() for all
    trainer = quiet(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(module, loader(), loader())
    trainer.test(module, loader())
    trainer.predict(module, loader())
    assert module.calls == ["on_validation_model_eval", "on_validation_start", "on_validation_end",
                            "on_test_model_eval", "on_test_start", "on_test_end",
                            "on_predict_model_eval", "on_predict_start", "on_predict_end"]
    assert module.dropout_on == [False, False]  # eval mode in validation_step
    assert module.training and module.dropout.training and not module.net[0].training


class MonteCarloDropout(Recorder):
    def on_validation_model_eval(self) -> None:
        self.eval()
        self.dropout.train()  # dropout stays on while validating


class StaysInEval(Recorder):
    def on_validation_model_train(self) -> None:
        self._record("on_validation_model_train")  # leaves the module in eval mode: its decision stands


def test_an_overridden_eval_hook_decides_the_mode_of_the_steps() -> None:
    module = MonteCarloDropout()
    quiet(max_epochs=1).validate(module, loader())
    assert module.dropout_on == [True, True] and module.training


def test_an_overridden_train_hook_runs_after_the_end_hooks_and_replaces_the_restore() -> None:
    module = StaysInEval()
    quiet(max_epochs=1).validate(module, loader())
    assert module.calls[-2:] == ["on_validation_end", "on_validation_model_train"]
    assert not module.training and not module.dropout.training


def test_a_train_hook_set_to_none_on_the_instance_is_not_called() -> None:
    module = StaysInEval()
    module.on_validation_model_train = None  # as Lightning's own tests switch an override off
    quiet(max_epochs=1).validate(module, loader())
    assert "on_validation_model_train" not in module.calls and module.training


def test_a_callback_with_a_module_only_hook_is_told_where_it_belongs() -> None:
    class Misplaced(Callback):
        def on_validation_model_eval(self, trainer: Any, module: Any) -> None: ...

    with pytest.raises(ValueError, match=r"on_validation_model_eval is a hook of the TrainingModule only"):
        quiet(callbacks=[Misplaced()])


def test_predict_in_eval_mode_and_train_mode_after() -> None:
    module = Recorder()
    predictions = quiet().predict(module, loader())
    assert len(predictions) == 2 and module.training and module.dropout.training
    # eval mode: dropout off, so predicting twice gives the same numbers
    assert torch.equal(torch.cat(predictions), torch.cat(quiet().predict(module, loader())))


def test_a_part_left_in_eval_mode_at_the_start_of_training_is_warned_about_and_kept_so() -> None:
    import warnings

    from stoker.user_frame import PossibleUserWarning

    module = Recorder()
    module.dropout.eval()  # e.g. a frozen part: the Trainer keeps its mode, and says so
    with pytest.warns(PossibleUserWarning, match=r"Found 1 module\(s\) in eval mode at the start of training.*"
                                                 r"In eval mode: dropout\."):
        quiet(max_epochs=1).fit(module, loader())
    assert module.training and not module.dropout.training  # kept as it was

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Found .* in eval mode", category=PossibleUserWarning)
        quiet(max_epochs=1).fit(Recorder(), loader())  # all in train mode: no warning
        quiet(max_epochs=0).fit(module, loader())  # nothing to train: no warning either
