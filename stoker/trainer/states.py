"""The values ``trainer.state.stage`` / ``.fn`` / ``.status`` take, as string enums under Lightning's names
(``RunningStage``, ``TrainerFn``, ``TrainerStatus``), so that a renamed script comparing against them runs. Each
member equals the plain string stoker stores (``RunningStage.VALIDATING == "validate"``); ``TrainerState`` is the
class of ``trainer.state``."""

from __future__ import annotations

from enum import Enum

from .run import RunState as TrainerState

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]


class TrainerStatus(str, Enum):
    """How the Trainer stands (``trainer.state.status``): before its first run, running, or how the last run ended
    (stoker tells an exception, ``"failed"``, from an interruption by the user or a signal)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


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
