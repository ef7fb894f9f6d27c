"""The values ``trainer.state.stage`` / ``.fn`` / ``.status`` take, as string enums under Lightning's names
(``RunningStage``, ``TrainerFn``, ``TrainerStatus``), so that a renamed script comparing against them, or reading
their ``.value``, runs. Each member equals the plain string stoker's code sets (``RunningStage.VALIDATING ==
"validate"``) and prints as it; ``TrainerState`` is the class of ``trainer.state``, which turns each string set on it
into its member."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .run import RunState

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]


class _Name(str, Enum):
    """A member is its string: equal to it, hashed as it, and printed as it (``f"Trainer.{fn}()"`` reads
    ``Trainer.fit()``), as Python 3.11's ``StrEnum`` does (stoker still runs on 3.10)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class TrainerStatus(_Name):
    """How the Trainer stands (``trainer.state.status``): before its first run, running, or how the last run ended
    (stoker tells an exception, ``"failed"``, from an interruption by the user or a signal)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class TrainerFn(_Name):
    """The entry point that runs: ``fit``, ``validate``, ``test`` or ``predict``."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(_Name):
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

    @property
    def evaluating(self) -> bool:
        """The sanity check, a validation or a test (Lightning's ``RunningStage.evaluating``)."""
        return self in (RunningStage.SANITY_CHECKING, RunningStage.VALIDATING, RunningStage.TESTING)


_MEMBERS: dict[str, type[_Name]] = {"fn": TrainerFn, "stage": RunningStage, "status": TrainerStatus}


@dataclass
class TrainerState(RunState):
    """``trainer.state``: :class:`~stoker.trainer.run.RunState` whose ``fn``, ``stage`` and ``status`` read as the
    members above (None stays None), whichever string the Trainer's code set.

    Example:
        >>> state = TrainerState()
        >>> state.stage = "validate"
        >>> state.stage is RunningStage.VALIDATING, state.stage.value, state.status
        (True, 'validate', <TrainerStatus.INITIALIZING: 'initializing'>)
    """

    fn: TrainerFn | None = None  # (re-declared with the members' types: what a reader gets)
    stage: RunningStage | None = None
    status: TrainerStatus = TrainerStatus.INITIALIZING

    def __setattr__(self, name: str, value: Any) -> None:
        kind = _MEMBERS.get(name)
        super().__setattr__(name, value if kind is None or value is None else kind(value))
