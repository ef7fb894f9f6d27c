"""Lightning's ``trainer.validate_loop``, ``trainer.test_loop`` and ``trainer.predict_loop``: read-only views with
Lightning's names over what the core Trainer records of each stage's latest run (``trainer.stage_record``, the
``num_*_batches`` counts). stoker has no loop objects for these stages: the names are views, nothing runs here.
Lightning's plumbing on them (``batch_progress``, ``setup_data``, the data fetchers) has no counterpart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...trainer.stages import STAGES

if TYPE_CHECKING:
    from ...callbacks import Callback
    from ...trainer.stages import StageRecord

__all__ = ["EvaluationLoopView", "PredictionLoopView"]


class StageFacts(Protocol):
    """What the views read of the Trainer (besides its ``num_*_batches``)."""

    stage_record: StageRecord
    callbacks: list[Callback]


class EvaluationLoopView:
    """``trainer.validate_loop`` / ``trainer.test_loop``: the stage's batch counts under Lightning's name.

    Example:
        >>> trainer.test(module, loader)            # doctest: +SKIP
        >>> trainer.test_loop.max_batches           # doctest: +SKIP
        [8]
    """

    def __init__(self, trainer: StageFacts, stage: str) -> None:
        self.trainer = trainer
        self.stage = STAGES[stage]

    @property
    def max_batches(self) -> list[int | float]:
        """Batches per loader of the stage's latest run (a ``CombinedLoader``'s iterables one by one; inf: no
        length), as ``trainer.num_val_batches`` / ``num_test_batches`` / ``num_predict_batches``."""
        return getattr(self.trainer, self.stage.count)


class PredictionLoopView(EvaluationLoopView):
    """``trainer.predict_loop``: ``predictions`` (what the latest ``predict`` returned; ``[]`` when it returned
    None) and ``epoch_batch_indices`` (during ``predict``: per loader, the sample indices of each batch predicted,
    kept for a prediction writer that writes at the epoch's end, else empty lists; ``[]`` outside ``predict``)."""

    def __init__(self, trainer: StageFacts) -> None:
        super().__init__(trainer, "predict")

    @property
    def predictions(self) -> list[Any]:
        return self.trainer.stage_record.predictions

    @property
    def epoch_batch_indices(self) -> list[list[Any]]:
        from ...callbacks import BasePredictionWriter

        indices = self.trainer.stage_record.batch_indices
        at_epoch_end = any(isinstance(c, BasePredictionWriter) and c.write_interval != "batch"
                           for c in self.trainer.callbacks)
        return indices if at_epoch_end else [[] for _ in indices]
