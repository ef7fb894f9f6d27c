"""The stages of a Trainer run, in one table: each stage's step method, loader hook, batch limit, batch count and
hook prefix. Everything that needs one of these names (set-up, the entry points, the loops) reads it here. And
:class:`StageRecord`, what the latest run of each stage read and gave (``trainer.stage_record``).

Owns the names and the record; which stage runs when is the loops' and entry points' business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stage:
    """One stage of a run.

    Attributes:
        name: The stage (``trainer.state.stage``; also the entry point's name, except ``fit`` whose training part
            is ``"train"``).
        step: The module's step method (``training_step``...).
        loader_hook: The module's / data module's method that gives this stage's loaders.
        limit: The Trainer attribute limiting its batches (``limit_train_batches``...).
        count: The Trainer attribute holding its batches per epoch (``num_training_batches``, a number; the others
            a list, one entry per loader).
        prefix: Its hooks are ``on_{prefix}_start``, ``on_{prefix}_batch_end``...
        step_required: The module must define ``step`` itself (``predict_step`` has a default: ``self(batch)``).

    Example:
        >>> STAGES["test"].hook("batch_end")
        'on_test_batch_end'
    """

    name: str
    step: str
    loader_hook: str
    limit: str
    count: str
    prefix: str
    step_required: bool = True

    def hook(self, event: str) -> str:
        """The hook name of ``event`` ("start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end")."""
        return f"on_{self.prefix}_{event}"


TRAIN = Stage("train", "training_step", "train_dataloader", "limit_train_batches", "num_training_batches", "train")
VALIDATE = Stage("validate", "validation_step", "val_dataloader", "limit_val_batches", "num_val_batches", "validation")
TEST = Stage("test", "test_step", "test_dataloader", "limit_test_batches", "num_test_batches", "test")
PREDICT = Stage("predict", "predict_step", "predict_dataloader", "limit_predict_batches", "num_predict_batches",
                "predict", step_required=False)

STAGES: dict[str, Stage] = {stage.name: stage for stage in (TRAIN, VALIDATE, TEST, PREDICT)}


@dataclass
class StageRecord:
    """What the latest ``validate`` / ``test`` / ``predict`` run (a fit's validation too) read and gave: facts for
    callbacks (the progress bars' totals) and for Lightning's loop names (``compat/lightning/loops.py``).

    Attributes:
        loader_batches: Stage name -> the batches each loader of its latest run reads per epoch (inf: unknown). A
            ``CombinedLoader`` of a non-sequential mode is one loader here, counted by its combined batches (the
            ``num_val_batches`` / ``num_test_batches`` / ``num_predict_batches`` lists count each of its iterables).
        predictions: What the latest ``predict`` returned (a list per loader when there were several); ``[]`` when
            it returned None (``return_predictions=False``), so that nothing is kept alive.
        batch_indices: While ``predict`` runs, one list per loader with each predicted batch's sample indices, kept
            when a prediction writer is among the callbacks (else empty lists); ``[]`` outside ``predict``.
    """

    loader_batches: dict[str, list[int | float]] = field(default_factory=dict)
    predictions: list[Any] = field(default_factory=list)
    batch_indices: list[list[Any]] = field(default_factory=list)

    def returned(self, outputs: list[Any], return_predictions: bool | None) -> list[Any] | None:
        """What ``predict`` returns (None with ``return_predictions=False``), recorded as :attr:`predictions`."""
        self.predictions = [] if return_predictions is False else outputs
        return None if return_predictions is False else outputs
