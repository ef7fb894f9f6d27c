"""Small things a user meets: detached outputs in ``on_train_batch_end``, warnings that point at the user's line,
``trainer.precision`` in one spelling."""

from __future__ import annotations

import warnings

import pytest
import torch

from stoker import Callback, EarlyStopping, Trainer
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class _Outputs(Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # float() of a tensor that needs grad warns
            self.seen.append((float(outputs["loss"]), outputs["loss"].requires_grad,
                              {k: getattr(v, "requires_grad", None) for k, v in outputs.items()}))


class _DictStep(Regressor):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return {"loss": loss, "scaled": loss * 2, "note": "x"}


@pytest.mark.parametrize("module", [Regressor, _DictStep])
def test_on_train_batch_end_gets_the_loss_without_its_graph(tmp_path, module):
    seen = _Outputs()
    trainer(tmp_path, max_epochs=1, callbacks=[seen], enable_checkpointing=False).fit(module(), loaders()[0])
    assert len(seen.seen) == 4
    for value, needs_grad, flags in seen.seen:
        assert isinstance(value, float) and not needs_grad
        assert all(flag in (False, None) for flag in flags.values())


def test_the_training_still_matches_with_detached_outputs(tmp_path):
    # The hooks get views: the step itself (backward on the live loss) is unchanged.
    a, b = Regressor(), Regressor()
    b.load_state_dict(a.state_dict())
    trainer(tmp_path / "a", max_epochs=1, enable_checkpointing=False).fit(a, loaders(shuffle=False)[0])
    trainer(tmp_path / "b", max_epochs=1, callbacks=[_Outputs()], enable_checkpointing=False).fit(
        b, loaders(shuffle=False)[0])
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_a_callbacks_warning_points_at_the_users_line(tmp_path):
    trainer(tmp_path, max_epochs=1).fit(Regressor(), loaders()[0])
    with pytest.warns(UserWarning, match="already holds checkpoints") as record:
        trainer(tmp_path, max_epochs=1).fit(Regressor(), loaders()[0])  # the same root: the earlier run's folder
    (warning,) = [w for w in record if "already holds checkpoints" in str(w.message)]
    assert warning.filename == __file__


class _NoValidationStep(Regressor):
    validation_step = None  # type: ignore[assignment]


def test_set_ups_warning_points_at_the_users_line(tmp_path):
    with pytest.warns(UserWarning, match="has no validation_step") as record:
        trainer(tmp_path, max_epochs=1, enable_checkpointing=False).fit(_NoValidationStep(), *loaders())
    assert [w.filename for w in record if "validation_step" in str(w.message)] == [__file__]


def test_an_early_stopping_warning_points_at_the_users_line(tmp_path):
    stop = EarlyStopping("nope", strict=False)
    with pytest.warns(RuntimeWarning, match="found no metric 'nope'") as record:
        trainer(tmp_path, max_epochs=1, callbacks=[stop], enable_checkpointing=False).fit(Regressor(), *loaders())
    assert {w.filename for w in record if "nope" in str(w.message)} == {__file__}


@pytest.mark.parametrize(("given", "name"), [("fp32", "fp32"), ("no", "fp32"), (32, "fp32"), ("32-true", "fp32"),
                                             ("16", "fp16"), ("16-mixed", "fp16"), ("bf16", "bf16"),
                                             ("bf16-mixed", "bf16"), ("bf16-true", "bf16-true"),
                                             ("16-true", "fp16-true")])
def test_trainer_precision_reads_one_spelling_whatever_alias_was_passed(given, name):
    t = Trainer(precision=given, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert t.precision == name


def test_the_summary_prints_the_same_precision(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, precision="bf16-mixed", enable_checkpointing=False)
    t.fit(Regressor(), loaders()[0])
    assert f"| precision: {t.precision} |" in capsys.readouterr().out and t.precision == "bf16"
