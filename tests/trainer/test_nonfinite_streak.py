"""``on_nonfinite_loss="skip"`` with a loss that stays NaN ends with an error instead of looping for ever, and skipped
steps are reported as counts, not one warning each."""

from __future__ import annotations

import warnings

import pytest

from stoker import Trainer
from stoker.trainer.nonfinite import MAX_SKIPS_IN_A_ROW, NonFiniteLoss
from tests.helpers.models import make_loader
from tests.trainer.test_bad_input import DATA, Loss, nan


def _always_nan() -> Loss:
    return Loss(nan, at=tuple((epoch, i) for epoch in range(100) for i in range(8)))


@pytest.mark.timeout(60)
def test_a_loss_that_stays_nan_with_only_max_steps_ends_with_an_error() -> None:
    """Before: global_step stuck at 0, the loop ran through epochs for ever (max_steps is never reached)."""
    trainer = Trainer(max_steps=5, on_nonfinite_loss="skip", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=rf"skipped {MAX_SKIPS_IN_A_ROW} optimizer steps in a row: the loss "
                                             r"stays NaN or inf \(last: .*global_step 0 \(epoch 12, batch_idx 3\)"):
            trainer.fit(_always_nan(), make_loader(DATA))
    assert trainer.global_step == 0
    skipped = [str(w.message) for w in record if "was skipped" in str(w.message)]
    assert 1 <= len(skipped) <= 14  # about one per epoch end (8 steps each), not one per skipped step (100)
    assert any("and 7 more since" in m for m in skipped)  # a whole epoch of skips in one report


def test_the_streak_limit_is_settable_and_a_finite_step_resets_it() -> None:
    guard = NonFiniteLoss("skip", max_skips_in_a_row=3)
    assert guard.max_skips_in_a_row == 3
    with pytest.raises(ValueError, match=r"max_skips_in_a_row=0 must be at least 1"):
        NonFiniteLoss("skip", max_skips_in_a_row=0)
    with pytest.raises(TypeError, match=r"must be an int"):
        NonFiniteLoss("skip", max_skips_in_a_row=2.5)  # type: ignore[arg-type]


def test_the_trainer_takes_the_streak_limit_from_its_run_options() -> None:
    from stoker.trainer import RunOptions
    from stoker.trainer import Trainer as CoreTrainer  # stoker.Trainer builds its RunOptions from Lightning's names

    trainer = CoreTrainer(max_steps=5, on_nonfinite_loss="skip", logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, options=RunOptions(nonfinite_skip_limit=3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"skipped 3 optimizer steps in a row.*RunOptions\(nonfinite_skip_limit"):
            trainer.fit(_always_nan(), make_loader(DATA))
