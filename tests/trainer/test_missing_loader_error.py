"""A stage with no loader to read: a TypeError (a missing argument, Lightning's kind) that is still a ValueError."""

from __future__ import annotations

import pytest

from stoker import Trainer
from tests.helpers.models import Regressor


def _trainer() -> Trainer:
    return Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)


@pytest.mark.parametrize("kind", [TypeError, ValueError])
def test_fit_without_a_train_loader(kind) -> None:
    with pytest.raises(kind, match="needs exactly one train loader"):
        _trainer().fit(Regressor())


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_an_evaluation_without_loaders(stage) -> None:
    with pytest.raises(TypeError, match="No dataloaders: pass dataloaders="):
        getattr(_trainer(), stage)(Regressor())
