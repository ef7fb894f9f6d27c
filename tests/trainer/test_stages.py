"""The stage table (``stoker/trainer/stages.py``) names things that exist: each stage's step method, loader hook,
batch limit, batch count and hooks are real names on TrainingModule / DataModule / Trainer / Callback."""

from __future__ import annotations

import pytest

from stoker import Callback, DataModule, Trainer, TrainingModule
from stoker.trainer.stages import PREDICT, STAGES, TRAIN


@pytest.mark.parametrize("stage", list(STAGES.values()), ids=list(STAGES))
def test_every_name_in_the_table_exists(stage) -> None:
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert callable(getattr(TrainingModule, stage.step))
    assert callable(getattr(DataModule, stage.loader_hook))
    assert hasattr(trainer, stage.limit) and hasattr(trainer, stage.count)
    for event in ("batch_start", "batch_end", "epoch_start", "epoch_end", "start", "end"):
        assert callable(getattr(Callback, stage.hook(event))), stage.hook(event)


def test_entry_points_and_their_stage() -> None:
    assert STAGES["train"] is TRAIN and STAGES["predict"] is PREDICT
    assert [s.name for s in STAGES.values() if not s.step_required] == ["predict"]  # predict_step has a default
    for name in ("validate", "test", "predict"):
        assert callable(getattr(Trainer, name))
