"""`TrainerParts`: what the loops, evaluation, checkpointing, set-up and manual optimization use of the Trainer.

A structural type, which :class:`~stoker.trainer.Trainer` satisfies: these modules are imported by the Trainer, so
they name what they read here instead of importing it back (the layer checks count every import, TYPE_CHECKING ones
too). The members are the Trainer's public attributes; its collaborators that live in those same modules (the fit
loop, preemption, set-up, the checkpoint state) appear as the small protocols below.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from ..accelerator import AcceleratedOptimizer, Accelerator
    from ..callbacks import Callback, ModelCheckpoint
    from ..loggers import Logger
    from .logging import Results
    from .nonfinite import NonFiniteLoss
    from .optim import LRSchedulerConfig
    from .options import RunLimits, RunOptions
    from .profilers import Profiler
    from .run import FitRun, RunState
    from .stages import StageRecord


class HookCalls(Protocol):
    """``hooks.HookDispatcher``: the implementations of a hook, whether there are any, and calling them."""

    def get(self, name: str) -> tuple[Callable[..., Any], ...]: ...

    def has(self, name: str) -> bool: ...

    def call(self, name: str, *args: Any) -> None: ...


class LoopPosition(Protocol):
    """The fit loop's position and counters (``loops.FitLoop``)."""

    epoch: int
    batches_done: int
    phase: str
    epoch_batches_finished: bool
    window_closed: bool  # the last training batch closed an accumulation window
    validation_count: int
    total_batches: int
    stop_reason: str | None

    @property
    def trained_epoch(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def end_epoch(self, run: FitRun) -> None: ...


class PreemptionWatch(Protocol):
    """``preemption.Preemption``: whether a check is due after the next step, and the check itself."""

    due: bool
    received: int | None
    saved_to: str | None

    def check(self, trainer: TrainerParts, blocking: bool = False) -> None: ...


class SetupSteps(Protocol):
    """``setup.RunSetup``: the set-up work the loops and the resume ask for during a fit."""

    def reload_loaders(self, run: FitRun, epoch: int) -> None: ...

    def val_loaders(self, run: FitRun) -> list[Any]: ...

    def continue_position(self, loader: Any) -> None: ...

    def start_datamodule(self, datamodule: Any, module: Any, fn: str) -> None: ...

    def teardown(self, module: Any) -> None: ...


class LoadedState(Protocol):
    """``checkpointing.TrainerCheckpointState``: what the last ``load_state`` read."""

    loaded: dict[str, Any] | None

    def take_loaded(self) -> dict[str, Any] | None: ...


class RunEnd(Protocol):
    """``run_report.RunReport``: told when a call starts, when its training starts, and how it ended."""

    def begin(self) -> None: ...

    def training_starts(self) -> None: ...

    def finish(self, fn: str, exception: BaseException | None) -> None: ...


class StatefulDataModule(Protocol):
    """A ``DataModule`` as the checkpoint sees it."""

    hparams: Mapping[str, Any]

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class TrainerParts(Protocol):
    """The Trainer's members that its loops, evaluation, checkpointing, set-up and manual optimization use."""

    accelerator: Accelerator
    options: RunOptions
    state: RunState
    module: torch.nn.Module | None
    datamodule: StatefulDataModule | None
    callbacks: list[Callback]
    loggers: list[Logger]
    prepared_optimizers: list[AcceleratedOptimizer]
    optimizers: list[torch.optim.Optimizer]
    lr_scheduler_configs: list[LRSchedulerConfig]
    hooks: HookCalls
    results: Results
    train_results: Results
    nonfinite: NonFiniteLoss
    preemption: PreemptionWatch
    run_setup: SetupSteps
    checkpoint_state: LoadedState
    fit_loop: LoopPosition
    fit_run: FitRun | None
    callback_metrics: dict[str, Any]
    logged_metrics: dict[str, Any]
    progress_bar_values: dict[str, Any]
    eval_log_steps: dict[tuple[str, int], int]
    default_root_dir: str
    limits: RunLimits
    max_epochs: int | None
    max_steps: int | None
    val_check_interval: int | float | timedelta
    val_check_seconds: float | None
    check_val_every_n_epoch: int | None
    limit_train_batches: int | float | None
    log_every_n_steps: int
    dry_run: bool
    clip_grad_norm: float | None
    clip_grad_value: float | None
    on_nonfinite_loss: str
    should_stop: bool
    num_training_batches: int | float
    num_val_batches: list[int | float]
    num_test_batches: list[int | float]
    stage_record: StageRecord
    profiler: Profiler | None
    run_report: RunEnd

    @property
    def global_step(self) -> int: ...

    @property
    def sanity_checking(self) -> bool: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    @property
    def accumulate(self) -> int: ...

    @property
    def max_epochs_effective(self) -> int | None: ...

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None: ...

    def find_last_checkpoint(self) -> str | None: ...

    def save_checkpoint(self, path: str | os.PathLike) -> str: ...

    def send_to_loggers(self, values: dict[str, Any], step: int | None = None) -> None: ...

    def apply_seed(self) -> None: ...
