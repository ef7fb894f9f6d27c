"""`Timer` in a real run: the sanity check counts as validation time (Lightning's does too), a fit whose training
stops before any validation leaves the validation time at zero (stoker runs no sanity check by default), and
each stage is measured only once it ran; ``verbose=False`` (Lightning's argument) stops without the printed line."""

from __future__ import annotations

import pytest

from stoker.callbacks import Timer
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def test_validation_time_counts_the_sanity_check_and_test_time_starts_with_test(tmp_path):
    module = Regressor()
    checked = Timer()
    trainer(tmp_path, max_steps=2, num_sanity_val_steps=2, enable_checkpointing=False,
            callbacks=[checked]).fit(module, *loaders())  # stops after 2 of 4 batches: no validation but the check
    assert checked.time_elapsed("train") > 0 and checked.time_elapsed("validate") > 0
    unchecked = Timer()
    t = trainer(tmp_path, max_steps=2, enable_checkpointing=False, callbacks=[unchecked], num_sanity_val_steps=0)
    t.fit(module, *loaders())
    assert unchecked.time_elapsed("validate") == 0 and unchecked.start_time("validate") is None
    assert unchecked.time_elapsed("test") == 0
    t.test(module, loaders()[1])
    assert unchecked.time_elapsed("test") > 0 and unchecked.end_time("test") is not None


@pytest.mark.parametrize("verbose", [True, False])
def test_verbose_false_stops_without_a_word(tmp_path, capsys, verbose):
    timer = Timer(duration={"seconds": 0}, verbose=verbose)
    t = trainer(tmp_path, max_epochs=3, enable_checkpointing=False, callbacks=[timer])
    t.fit(Regressor(), *loaders())
    assert t.global_step == 1 and timer.stopped  # the zero duration stops it after its first step either way
    out = capsys.readouterr().out
    assert ("stopped with a checkpoint." in out) is verbose  # the Timer's own line
    assert "fit stopped at epoch 0 (global_step=1): Timer: duration" in out  # the run's closing line names it anyway
