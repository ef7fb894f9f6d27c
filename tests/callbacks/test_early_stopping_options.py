"""EarlyStopping's Lightning options in real fits: thresholds, when the check runs, verbose."""

from __future__ import annotations

import pytest

from stoker import EarlyStopping
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.callbacks.test_stopping_fit import EpochLoss


def _fit(tmp_path, stop, scores, **kw):
    module = Regressor(val_scores=scores)
    t = trainer(tmp_path, max_epochs=len(scores), callbacks=[stop], enable_checkpointing=False, num_sanity_val_steps=0,
                **kw)
    t.fit(module, *loaders())
    return t, module


def test_stopping_threshold_stops_once_good_enough(tmp_path):
    stop = EarlyStopping("val/score", patience=10, stopping_threshold=0.1)
    t, module = _fit(tmp_path, stop, [1.0, 0.5, 0.09, 0.05, 0.01])
    assert stop.stopped_epoch == 2 and module.validations == 3 and t.global_step == 12
    assert stop.stopping_reason_message == "Stopping threshold reached: val/score = 0.09 < 0.1."
    assert stop.best_score == 0.09 and stop.wait_count == 0


def test_divergence_threshold_stops_a_hopeless_run(tmp_path):
    stop = EarlyStopping("val/score", patience=10, divergence_threshold=3.0)
    _fit(tmp_path, stop, [1.0, 2.0, 3.5, 0.1])
    assert stop.stopped_epoch == 2 and stop.stopping_reason_message.startswith(
        "Divergence threshold reached: val/score = 3.5 >")
    assert stop.best_score == 1.0


def test_thresholds_follow_the_mode(tmp_path):
    stop = EarlyStopping("val/score", mode="max", stopping_threshold=0.9, divergence_threshold=0.0)
    _fit(tmp_path / "a", stop, [0.5, 0.95, 0.99])
    assert stop.stopped_epoch == 1 and "0.95 > 0.9" in stop.stopping_reason_message
    stop = EarlyStopping("val/score", mode="max", stopping_threshold=0.9, divergence_threshold=0.0)
    _fit(tmp_path / "b", stop, [0.5, -0.1, 0.99])
    assert stop.stopped_epoch == 1 and "-0.1 < 0" in stop.stopping_reason_message
    equal = EarlyStopping("val/score", patience=5, stopping_threshold=0.5)  # strictly better than the threshold
    _fit(tmp_path / "c", equal, [0.5, 0.5, 0.5])
    assert equal.stopped_epoch == -1


def test_check_on_train_epoch_end_counts_epochs_not_validations(tmp_path):
    # Validation twice per epoch, the score never improves after the first check; patience 2.
    after_validation = EarlyStopping("val/score", patience=2)
    _fit(tmp_path / "a", after_validation, [1.0] * 5, val_check_interval=2)
    assert after_validation.stopped_epoch == 1  # checks: e0 (x2), e1 first validation -> stop
    per_epoch = EarlyStopping("val/score", patience=2, check_on_train_epoch_end=True)
    t, module = _fit(tmp_path / "b", per_epoch, [1.0] * 5, val_check_interval=2)
    assert per_epoch.stopped_epoch == 2 and module.validations == 6 and t.current_epoch == 3


def test_check_only_after_validation_never_checks_a_fit_without_it(tmp_path):
    stop = EarlyStopping("train/epoch_loss", mode="max", patience=1, check_on_train_epoch_end=False)
    t = trainer(tmp_path, max_epochs=3, callbacks=[stop], enable_checkpointing=False)
    t.fit(EpochLoss(), loaders()[0])
    assert stop.stopped_epoch == -1 and t.current_epoch == 3


def test_verbose_prints_improvements(tmp_path, capsys):
    _fit(tmp_path, EarlyStopping("val/score", patience=5, verbose=True), [1.0, 0.5, 0.7])
    out = capsys.readouterr().out
    assert "val/score improved to 1 (epoch 0)" in out and "val/score improved to 0.5 (epoch 1)" in out
    assert out.count("improved") == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"stopping_threshold": "0.1"}, "stopping_threshold='0.1'"),
    ({"divergence_threshold": float("nan")}, "divergence_threshold=nan"),
    ({"check_on_train_epoch_end": "yes"}, "check_on_train_epoch_end='yes'"),
    ({"check_on_train_epoch_end": 1}, "check_on_train_epoch_end=1"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EarlyStopping("val/loss", **kwargs)


def test_a_copy_through_pickle_has_the_same_attributes():
    # Attribute values that do not equal themselves (a NaN placeholder) would make two equal callbacks differ.
    import pickle

    stop = EarlyStopping("val/loss", patience=2)
    assert vars(pickle.loads(pickle.dumps(stop))) == vars(stop)
