"""The values ``trainer.state.stage`` / ``trainer.state.fn`` take, as string enums under Lightning's names
(``RunningStage``, ``TrainerFn``), so that a renamed script comparing against them runs. Each member equals the
plain string stoker stores (``RunningStage.VALIDATING == "validate"``)."""

from __future__ import annotations

from enum import Enum

__all__ = ["RunningStage", "TrainerFn"]


class TrainerFn(str, Enum):
    """The entry point that runs: ``fit``, ``validate``, ``test`` or ``predict``."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(str, Enum):
    """The stage that runs (``trainer.state.stage``): training, the sanity check, validation, test or predict."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def dataloader_prefix(self) -> str | None:
        """The prefix of this stage's loader hook (``"val"`` for ``val_dataloader``); None for the sanity check."""
        return {"sanity_check": None, "validate": "val"}.get(self.value, self.value)
