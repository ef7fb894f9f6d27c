"""The hook contract: exact sequence and counts of a fit with validation, dispatch order, and hook-name checks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from stoker import Callback, Trainer, TrainingModule
from tests.helpers.hooks import HookRecorder, record_hooks
from tests.helpers.models import Regressor, make_loader, make_regression_data

# Lightning's order: the gradients are cleared at a window's first batch, before its backward
BATCH = ["on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
         "on_before_optimizer_step", "on_train_batch_end"]
VALIDATION = ["on_validation_start", "on_validation_epoch_start",
              *["on_validation_batch_start", "on_validation_batch_end"] * 2,
              "on_validation_epoch_end", "on_validation_end"]


@record_hooks
class RecordingModule(Regressor):
    """Appends ``m:<hook>`` for every hook the Trainer calls on the module."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls, self.tag = calls, "m"


def expand(names: list[str]) -> list[str]:
    """Each hook: the callbacks in list order, then the module (Lightning's order)."""
    return [f"{who}:{name}" for name in names for who in ("a", "b", "m")]


def fit_with_recording(accumulate: int = 1, n: int = 24) -> list[str]:
    calls: list[str] = []
    trainer = Trainer(max_epochs=2, accumulate=accumulate, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, callbacks=[HookRecorder(calls, "a"), HookRecorder(calls, "b")],
                      num_sanity_val_steps=0)
    data = make_regression_data(n=n)
    trainer.fit(RecordingModule(calls), make_loader(data, batch_size=8), make_loader(make_regression_data(n=16), batch_size=8))
    return calls


def test_hook_sequence_of_a_fit_with_validation() -> None:
    epoch = ["on_train_epoch_start", *BATCH * 3, *VALIDATION, "on_train_epoch_end"]
    expected = expand(["setup", "on_fit_start", "on_train_start", *epoch * 2, "on_train_end", "on_fit_end",
                       "teardown"])
    assert fit_with_recording() == expected


def test_hook_counts_with_accumulation() -> None:
    counts = Counter(fit_with_recording(accumulate=2, n=40))  # 5 batches per epoch: windows 2, 2, 1
    assert counts["m:on_train_batch_start"] == counts["b:on_train_batch_end"] == 10
    assert counts["m:on_before_backward"] == counts["a:on_after_backward"] == 10
    assert counts["m:on_before_optimizer_step"] == counts["b:on_before_zero_grad"] == 6
    assert counts["a:on_validation_batch_end"] == 4 and counts["b:on_validation_end"] == 2
    assert counts["m:on_train_epoch_end"] == counts["m:on_train_epoch_start"] == 2
    assert counts["a:setup"] == counts["a:teardown"] == 1


def test_a_default_fit_first_runs_lightnings_sanity_check_of_two_val_batches() -> None:
    calls: list[str] = []
    stages: list[tuple[str, bool, bool]] = []

    class Stage(Callback):
        def on_validation_batch_start(self, trainer: Any, module: Any, *args: Any) -> None:
            stages.append((str(trainer.state.stage), trainer.sanity_checking, trainer.validating))

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[HookRecorder(calls, "a"), Stage()])
    trainer.fit(RecordingModule(calls), make_loader(make_regression_data(n=8), batch_size=8),
                make_loader(make_regression_data(n=32), batch_size=8))  # one train batch, four val batches
    # The module records every hook, so it gets the two sanity hooks as well; Lightning's module has no default of
    # them, and a module that does not define them is not asked.
    def both(names: list[str]) -> list[str]:
        return [f"{who}:{name}" for name in names for who in ("a", "m")]

    sanity = both(["on_sanity_check_start", *VALIDATION, "on_sanity_check_end"])
    assert calls[:4] == both(["setup", "on_fit_start"]) and calls[4:4 + len(sanity)] == sanity
    assert calls[4 + len(sanity):][:2] == both(["on_train_start"])
    assert stages == [("sanity_check", True, False)] * 2 + [("validate", False, True)] * 4
    assert trainer.num_sanity_val_batches == [2] and not trainer.sanity_checking
    assert "on_sanity_check_start" not in vars(TrainingModule) and "on_sanity_check_start" in vars(Callback)


def test_validate_test_predict_hooks() -> None:
    calls: list[str] = []
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[HookRecorder(calls, "a"), HookRecorder(calls, "b")])
    module = RecordingModule(calls)
    loader = make_loader(make_regression_data(n=16), batch_size=8)
    trainer.test(module, loader)
    test = ["on_test_start", "on_test_epoch_start", *["on_test_batch_start", "on_test_batch_end"] * 2,
            "on_test_epoch_end", "on_test_end"]
    assert calls == expand(["setup", *test, "teardown"])
    calls.clear()
    trainer.predict(module, make_loader(make_regression_data(n=16).tensors[0], batch_size=8))
    predict = ["on_predict_start", "on_predict_epoch_start", *["on_predict_batch_start", "on_predict_batch_end"] * 2,
               "on_predict_epoch_end", "on_predict_end"]
    assert calls == expand(["setup", *predict, "teardown"])


class Misspelled(Callback):
    def on_train_epoch_ends(self, trainer: Any, module: Any) -> None:
        pass


def test_a_callback_method_that_is_not_a_hook_fails_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match=r"Misspelled.on_train_epoch_ends is not a Trainer hook.*"
                                         r"Did you mean 'on_train_epoch_end'\?"):
        Trainer(callbacks=[Misspelled()])


def test_callbacks_must_be_callback_instances() -> None:
    with pytest.raises(TypeError, match="entry #0 is a class"):
        Trainer(callbacks=[HookRecorder])
    with pytest.raises(TypeError, match="not a Callback instance"):
        Trainer(callbacks=[object()])


def test_exception_reaches_on_exception_and_teardown() -> None:
    calls: list[str] = []

    class Boom(RecordingModule):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise RuntimeError("boom")

    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[HookRecorder(calls, "a")])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom(calls), make_loader(make_regression_data(n=8)))
    assert calls[-4:] == ["a:on_exception", "m:on_exception", "a:teardown", "m:teardown"]
    assert trainer.state.fn is None  # the Trainer can run again


def test_a_mock_with_the_callback_spec_receives_every_hook():
    # An object answering through __getattr__ (unittest.mock's Mock(spec=Callback), a user's test double) defines
    # no hook on its class; each hook it answers is called, as on a subclass that overrides them all.
    from unittest import mock

    double = mock.Mock(spec=Callback)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[double])
    trainer.fit(Regressor(), make_loader(make_regression_data(n=16), batch_size=8))
    called = [c[0] for c in double.method_calls]
    assert called[:3] == ["setup", "on_fit_start", "on_train_start"]
    assert called.count("on_train_batch_end") == 2 and called[-1] == "teardown"
