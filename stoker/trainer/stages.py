"""The stages of a Trainer run, in one table: each stage's step method, loader hook, batch limit, batch count and
hook prefix. Everything that needs one of these names (set-up, the entry points, the loops) reads it here.

Owns the names only; which stage runs when is the loops' and entry points' business.
"""

from __future__ import annotations

from dataclasses import dataclass


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
