"""The run objects: what set-up (``setup.py``) prepared for one ``fit`` or evaluation, handed to the loops.

Owns nothing but the record: set-up builds a :class:`FitRun` / :class:`EvalRun` and returns it, the Trainer passes
it to the loops explicitly (``FitLoop.run(run)``, ``run_evaluation(trainer, stage, run.loaders)``). What callbacks
read stays on the Trainer's public attributes (``optimizers``, ``lr_scheduler_configs``, ``num_training_batches``,
``num_val_batches``, ``fit_run.train_loader``...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class FitRun:
    """One ``fit`` call's prepared objects and decisions.

    Attributes:
        model: The prepared model (the module itself in one process; a DDP/FSDP wrapper otherwise).
        train_loader: The prepared (resumable, sharded, limited) train loader.
        val_loaders: The prepared val loaders (empty: none given).
        val_batches: ``num_val_batches`` as the fit's val loaders set it (``[]`` before they are asked for): a
            later test or predict run reads these again, as Lightning does outside a validate run.
        val_enabled: Validation runs in this fit: a ``validation_step`` and at least one val batch.
        val_check_batch: Validate every this many training batches (None: at the epoch's end only).
        training_step: Calls ``training_step(batch, batch_idx)`` (through the DDP wrapper's forward when there
            is one, so that gradients synchronise).
        automatic: The module's ``automatic_optimization``.
        step_schedulers: The scheduler configs stepped per optimizer step (``interval="step"``).
        manual_optimizers: The optimizers as ``module.optimizers()`` hands them out under manual optimization.
        train_from_hooks, val_from_hooks: The loaders came from the module's / data module's hooks (not from
            ``fit``'s arguments), so ``reload_dataloaders_every_n_epochs`` may ask for them again.
    """

    model: Any
    train_loader: Any
    val_loaders: list[Any]
    val_enabled: bool
    val_check_batch: int | None
    training_step: Callable[[Any, int], Any]
    automatic: bool = True
    step_schedulers: list[Any] = field(default_factory=list)
    manual_optimizers: list[Any] = field(default_factory=list)
    val_batches: list[int | float] = field(default_factory=list)
    train_from_hooks: bool = False
    val_from_hooks: bool = False


@dataclass(eq=False)
class EvalRun:
    """One ``validate`` / ``test`` / ``predict`` call's prepared model and loaders."""

    model: Any
    loaders: list[Any]


@dataclass
class RunState:
    """What the Trainer is doing: ``fn`` is the entry point ("fit", "validate", "test", "predict"), ``stage``
    the current part ("train", "validate", "test", "predict"), both None between runs."""

    fn: str | None = None
    stage: str | None = None
    # "initializing" before the first run, "running", then how the last one ended: "finished", "interrupted"
    # (KeyboardInterrupt, SystemExit) or "failed" (Lightning's TrainerStatus has no "failed": it says interrupted)
    status: str = "initializing"

    @property
    def finished(self) -> bool:
        """The last run ended normally."""
        return self.status == "finished"

    @property
    def stopped(self) -> bool:
        """The last run ended by an exception (Lightning's ``trainer.state.stopped``)."""
        return self.status in ("interrupted", "failed")
