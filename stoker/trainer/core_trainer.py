"""`Trainer`: owns an Accelerator and runs fit / validate / test / predict through its public API.

Owns: the constructor contract of API.md §2 (validated here, once), the run's collaborators (hooks, logged results,
non-finite watch, preemption, set-up) and the facts callbacks read. Loops: ``loops.py``, ``evaluation.py``; the
checkpoint contents and preemption: ``checkpointing.py``; Lightning's extra names: ``stoker/compat/lightning/``.
``global_step`` counts *applied* optimizer steps (not accumulation micro-steps, not skipped fp16 steps).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from ..accelerator import Accelerator, SingleDevice, check_accumulation_steps, parse_precision, set_seed
from . import args as check
from .checkpointing import (BEST, NoModuleError, TrainerCheckpointState, find_last_checkpoint, resolve_ckpt,
                            restore, save_weights)
from .components import (build_callbacks, build_loggers, checkpoint_search_folders, continue_logged_run,
                         make_accelerator, settle_loggers)
from .evaluation import run_evaluation, run_predict, run_sanity_check
from .hooks import HookDispatcher, clear_gradients, defines_hook
from .loader_requests import flat_loaders, passed_to
from .hparams import log_hyperparams
from .logging import Results
from .manual import manual_backward
from .loops import FitLoop
from .module import TrainingModule
from .nonfinite import NonFiniteLoss, check_mode as check_nonfinite_mode
from .options import LimitView, RunLimits, RunOptions
from .preemption import Preemption
from .resume_first import restore_for_evaluation, restore_modules_and_callbacks
from .profilers import Profiler
from .run_report import RunReport
from .run_scope import run_scope
from .setup import RunSetup
from .spawn import runs_in_workers
from .stages import PREDICT, STAGES, TRAIN, StageRecord
from .states import RunningStage, TrainerState

if TYPE_CHECKING:
    from ..accelerator import AcceleratedOptimizer
    from ..callbacks import Callback, ModelCheckpoint
    from ..loggers import Logger
    from .datamodule import DataModule
    from .optim import LRSchedulerConfig
    from .run import FitRun


@runs_in_workers  # strategy="ddp_spawn": fit / validate / test / predict run in processes started for them
class Trainer:
    """Runs the training loop of a :class:`TrainingModule` on an :class:`~stoker.Accelerator`.

    Args:
        max_epochs: Epochs to train (-1 or None: no limit). Neither this nor ``max_steps``: one epoch.
        max_steps: Applied optimizer steps to train (see ``global_step``); whichever limit comes first stops.
        accumulate: Micro-batches per optimizer step; a last, shorter window is averaged over its true length.
        precision: "fp32" | "fp16" | "bf16" (also "32-true", "16-mixed", "bf16-mixed"; "bf16-true"/"16-true"/"64-true":
            the weights themselves in that dtype, no scaler); the mixed ones run the steps under autocast.
        clip_grad_norm: Clip the gradients' total norm to this (after fp16 unscaling), or None.
        clip_grad_value: Clip every gradient element to ``[-v, v]`` instead, or None.
        callbacks: ``Callback`` instances; a ``ModelCheckpoint`` and a ``ProgressBar`` are added when enabled and
            not given.
        logger: True (a TensorBoardLogger in ``default_root_dir/stoker_logs``), False, a Logger, a name, a list...
        default_root_dir: Where logs, checkpoints and preemption checkpoints go.
        enable_checkpointing: Add a default ``ModelCheckpoint`` (a checkpoint per epoch, ``epoch=N-step=M.ckpt``).
        enable_progress_bar: Add a default ``ProgressBar``.
        enable_model_summary: Add a default ``ModelSummary`` (the layer table printed at the start of ``fit``).
        val_check_interval: Validate every this fraction of a training epoch (float), every this many
            training batches (int), or once this much time has passed since the last validation (``"DD:HH:MM:SS"``,
            a ``timedelta`` or a dict of its keywords; checked after each batch).
        check_val_every_n_epoch: Validate in every n-th epoch only; None counts an int ``val_check_interval``
            across epochs (or lets a time interval run across them).
        limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches: Batches per epoch, as
            a count or a fraction of the loader (None: all).
        log_every_n_steps: Send step values to the loggers every n optimizer steps.
        seed: Seed everything (``set_seed``) at the start of ``fit``, before the loaders get their shuffle seeds.
        deterministic: Ask torch for deterministic algorithms.
        accelerator: "auto" | "cpu" | "gpu" | "cuda" | "mps".
        devices: Processes to run: "auto", an int, or a list of GPU indices. More than one from a plain
            ``python script.py`` re-runs the script in that many processes; under torchrun the counts must match.
        strategy: The Accelerator's strategy: "auto" | "ddp" | "fsdp", or a strategy object. "ddp_spawn" ("ddp_fork",
            "ddp_notebook"): this process stays one; each fit/validate/test/predict starts ``devices`` (spawn.py).
        on_nonfinite_loss: When ``training_step`` returns a NaN/inf loss: "raise" (stop, naming the step and
            batch), "skip" (that optimizer step never happens) or "warn" (train on); see ``nonfinite.py``.
        options: :class:`RunOptions` (minimum epochs/steps, a sanity check, reloading loaders).

    Example:
        >>> trainer = Trainer(max_epochs=3, accumulate=2, precision="bf16", clip_grad_norm=1.0)
        >>> trainer.fit(module, train_loader, val_loader, ckpt_path="last")  # doctest: +SKIP
    """

    accelerator_class: type[Accelerator] = Accelerator  # what trainer.accelerator is (stoker.Trainer: Accelerate's)

    def __init__(
        self, *, max_epochs: int | None = None, max_steps: int | None = None, accumulate: int = 1,
        precision: str = "fp32", clip_grad_norm: float | None = None, clip_grad_value: float | None = None,
        callbacks: list[Callback] | Callback | None = None,
        logger: Logger | list[Logger | str] | bool | str | None = True,
        default_root_dir: str | os.PathLike = ".", enable_checkpointing: bool = True,
        enable_progress_bar: bool = True, enable_model_summary: bool = True, val_check_interval: int | float = 1.0,
        check_val_every_n_epoch: int | None = 1, limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None, limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None, log_every_n_steps: int = 50, seed: int | None = None,
        deterministic: bool = False, accelerator: str = "auto", devices: int | str | list[int] = "auto",
        strategy: str | SingleDevice = "auto", on_nonfinite_loss: str = "raise", options: RunOptions | None = None,
    ) -> None:
        self._check_limits(max_epochs, max_steps, clip_grad_norm, clip_grad_value, val_check_interval,
                           check_val_every_n_epoch)
        precision = parse_precision(precision, argument="Trainer(precision=...)")
        limits = (limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches)
        for name, value in zip(("limit_train_batches", "limit_val_batches", "limit_test_batches",
                                "limit_predict_batches"), limits):
            setattr(self, name, check.batch_limit(name, value))
        self.log_every_n_steps = check.positive_int("log_every_n_steps", log_every_n_steps)
        self.seed, self.deterministic = check.seed_value(seed), bool(deterministic)
        self.on_nonfinite_loss = check_nonfinite_mode(on_nonfinite_loss)
        self.default_root_dir, self.devices = os.path.expanduser(os.fspath(default_root_dir)), devices  # "~/runs"
        self.profiler: Profiler | None = None  # stoker.Trainer(profiler=...) sets it (profilers.py); None: not profiled
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"Trainer(options={options!r}) must be a stoker.trainer.RunOptions or None.")
        self.options = options or RunOptions()
        self.accelerator, self.processes_per_node = make_accelerator(
            accelerator, devices, strategy, accumulate, precision, self.default_root_dir,
            own_samplers=not self.options.use_distributed_sampler, cls=self.accelerator_class)
        self.checkpoint_state = TrainerCheckpointState(self)
        self.accelerator.register_for_checkpointing(self.checkpoint_state)
        self.callbacks = build_callbacks(callbacks, enable_checkpointing, enable_progress_bar, enable_model_summary)
        self.loggers = build_loggers(logger, self.default_root_dir)
        settle_loggers(self.accelerator, self.loggers)
        self._init_run_state()

    # -- construction helpers -------------------------------------------------------------------------------------
    def _check_limits(self, max_epochs: Any, max_steps: Any, clip_grad_norm: Any, clip_grad_value: Any,
                      val_check_interval: Any, check_val_every_n_epoch: Any) -> None:
        self.limits = RunLimits()  # what the loops read; max_epochs / max_steps are views (Lightning's: compat/)
        self.max_epochs, self.max_steps = max_epochs, max_steps
        self.clip_grad_norm = check.clip_value("clip_grad_norm", clip_grad_norm)
        self.clip_grad_value = check.clip_value("clip_grad_value", clip_grad_value)
        if self.clip_grad_norm is not None and self.clip_grad_value is not None:
            raise ValueError(f"Trainer(clip_grad_norm={clip_grad_norm!r}, clip_grad_value={clip_grad_value!r}): "
                             "choose one way of clipping.")
        self.val_check_interval = check.val_check_interval(val_check_interval)
        interval = self.val_check_interval  # a timedelta: validation by wall-clock time (a host clock, no sync)
        self.val_check_seconds = interval.total_seconds() if isinstance(interval, timedelta) else None
        self.check_val_every_n_epoch = check.optional_int("check_val_every_n_epoch", check_val_every_n_epoch, 1,
                                                          lightning=check.EVERY_N_EPOCH_WORDS)
        check.interval_across_epochs(interval, self.check_val_every_n_epoch)

    def _init_run_state(self) -> None:
        self.state = TrainerState()
        self.fit_loop = FitLoop(self)
        self.should_stop = False
        self.callback_metrics: dict[str, Any] = {}
        self.logged_metrics: dict[str, Any] = {}
        self.progress_bar_values: dict[str, Any] = {}  # prog_bar values as logged: device tensors, no sync
        self.eval_log_steps: dict[tuple[str, int], int] = {}  # (stage, loader) -> per-step values sent
        self.module: TrainingModule | None = None
        self.datamodule: DataModule | None = None
        self.prepared_optimizers: list[AcceleratedOptimizer] = []  # wrapping configure_optimizers' optimizers:
        self.optimizers: list[torch.optim.Optimizer] = []  # those, as it returned them (Lightning's trainer.optimizers)
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.num_training_batches: int | float = float("inf")
        self.num_val_batches: list[int | float] = []
        self.num_test_batches, self.num_predict_batches = [], []  # per loader, as num_val_batches
        self.stage_record = StageRecord()  # what the latest validate/test/predict read and returned
        # The run's collaborators, public so that the loops, evaluation and checkpointing need no private name.
        self.hooks: HookDispatcher = HookDispatcher(self, None, ())  # rebuilt per run with the module
        self.train_results = Results(self, TRAIN.name)
        self.results = self.train_results  # where self.log records now (an evaluation swaps in its own)
        self.nonfinite = NonFiniteLoss(self.on_nonfinite_loss, self.options.nonfinite_skip_limit)
        self.preemption = Preemption()
        self.run_setup = RunSetup(self)
        self.fit_run: FitRun | None = None  # what set-up prepared for the current (or last) fit: run.py
        self.run_report = RunReport(self)  # the closing line and run_summary.json of each fit/validate/test

    # -- entry points ---------------------------------------------------------------------------------------------
    def fit(self, module: TrainingModule | None = None, train_dataloaders: Any = None, val_dataloaders: Any = None,
            ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None) -> None:
        """Trains ``module`` on the loaders given, or those of ``datamodule`` (a ``DataModule``, which may also be
        passed in ``train_dataloaders``' place); ``ckpt_path="last"`` resumes from the newest checkpoint (fresh
        start when none), ``"best"`` from the ModelCheckpoint's best one, or a checkpoint folder."""
        setup = self.run_setup
        module = setup.check_module(module, fit=True)
        datamodule, train_dataloaders = setup.datamodule("fit", datamodule, train_dataloaders)
        if datamodule is not None and val_dataloaders is not None:
            raise ValueError("Trainer.fit() got both val_dataloaders and datamodule=; pass one of them.")
        self.datamodule = datamodule
        passed = (train_dataloaders is not None, val_dataloaders is not None)
        setup.begin_fit(module, train_dataloaders, val_dataloaders)  # loaders passed: checked now; hooks: later
        path = resolve_ckpt(self, ckpt_path)  # once: every part of the resume reads this folder
        continue_logged_run(self, None if ckpt_path == BEST else path)  # before setup: the versions decide folders
        with run_scope(self, "fit", module, datamodule):
            module.configure_model()
            saved = restore_modules_and_callbacks(self, path)  # Lightning's order: before configure_optimizers
            run = self.fit_run = setup.prepare_fit(module, passed)
            self.nonfinite.reset()
            self.fit_loop.validation_count, self.fit_loop.window_closed = 0, False
            setup.resume_from(run, path)  # a checkpoint's train-loader position needs the loader
            restore(self, path, ckpt_path, run.train_loader, saved)
            log_hyperparams(self.module, self.datamodule, self.loggers, main=self.is_global_zero)
            self.preemption.install(self.accelerator.num_processes)
            try:
                self.state.stage = TRAIN.name
                self.hooks.call("on_fit_start")
                run_sanity_check(self, run)  # after clearing the gradients the run starts with
                self.run_report.training_starts()
                if setup.start_training(run):  # nothing left to train: no on_train_start/_end (Lightning's)
                    self.hooks.call("on_train_start")
                    self.fit_loop.run(run)
                    self.state.stage = TRAIN.name
                    self.hooks.call("on_train_end")
                self.hooks.call("on_fit_end")
            finally:
                self.preemption.uninstall()

    def validate(self, module: TrainingModule | None = None, dataloaders: Any = None,
                 ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None) -> list[dict]:
        """Runs ``validation_step`` over ``dataloaders`` (or ``datamodule``'s); one dict of epoch metrics per
        loader. ``ckpt_path``: "best", "last" or a folder loaded first (None: see ``checkpointing.eval_checkpoint``)."""
        return self._evaluate("validate", module, dataloaders, ckpt_path, datamodule)

    def test(self, module: TrainingModule | None = None, dataloaders: Any = None,
             ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None) -> list[dict]:
        """Runs ``test_step`` over ``dataloaders`` (or ``datamodule``'s); one dict of epoch metrics per loader."""
        return self._evaluate("test", module, dataloaders, ckpt_path, datamodule)

    def predict(self, module: TrainingModule | None = None, dataloaders: Any = None,
                ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None,
                return_predictions: bool | None = None) -> list[Any] | None:
        """``predict_step``'s outputs, a list per loader when there are several (None: ``return_predictions=False``)."""
        outputs = self._evaluate("predict", module, dataloaders, ckpt_path, datamodule)
        return self.stage_record.returned(outputs, return_predictions)

    def _evaluate(self, fn: str, module: TrainingModule | None, dataloaders: Any, ckpt_path: Any,
                  datamodule: DataModule | None) -> list[Any]:
        setup = self.run_setup
        module = setup.eval_module(module, fn)
        datamodule, dataloaders = setup.datamodule(fn, datamodule, dataloaders)
        stage = STAGES[fn]
        self.datamodule = datamodule
        flat_loaders(dataloaders, passed_to(fn, "dataloaders"))  # checked now; the hooks are asked when it runs
        with run_scope(self, fn, module, datamodule):
            module.configure_model()
            run = setup.prepare_eval(module, stage)
            restore_for_evaluation(self, ckpt_path, run.model)  # Lightning's order: hooks, states, weights
            log_hyperparams(self.module, self.datamodule, self.loggers, main=self.is_global_zero)
            clear_gradients(module, self.accelerator)
            self.state.stage = fn
            setup.eval_loaders(run, dataloaders, module, stage)
            return run_predict(self, run.loaders) if stage is PREDICT else run_evaluation(self, fn, run.loaders)

    # -- logging --------------------------------------------------------------------------------------------------
    def send_to_loggers(self, values: dict[str, Any], step: int | None = None) -> None:
        """Records ``values`` in ``logged_metrics`` and sends them to the loggers (main process) at ``step``, by
        default the current ``global_step``; nothing during the sanity check."""
        if not values or self.sanity_checking:
            return
        self.logged_metrics.update(values)  # what was logged; the "epoch" label below is for the loggers only
        values = dict(values)
        logged_step = values.pop("step", None) if step is None else None  # a logged "step" is the x-axis (Lightning)
        if step is None and logged_step is None:  # outside fit: the epoch that made the weights (current_epoch on)
            values.setdefault("epoch", self.current_epoch if self.state.fn == "fit" else self.fit_loop.trained_epoch)
        if self.is_global_zero:
            step = (self.global_step if logged_step is None else int(logged_step)) if step is None else step
            for logger in self.loggers:
                logger.log_metrics(values, step=step)
                if getattr(logger, "save_after_log", True) and hasattr(logger, "save"):  # Lightning's contract;
                    logger.save()  # a duck-typed logger may lack both (Logger.save_after_log)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only; while a progress bar is drawn it goes above the bar (the bar
        routes stdout through itself), so the bar is not garbled."""
        if self.is_global_zero:
            print(*args, **kwargs)

    # -- checkpoints and seeding ----------------------------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike, weights_only: bool = False) -> str:
        """Writes a full resumable checkpoint (an Accelerator ``save_state`` folder) to ``path``; returns it.

        It holds the model, optimizers, schedulers, grad scaler, RNG states, loader positions, the loop position,
        callback states (by ``state_key``), ``on_save_checkpoint`` entries and the hyperparameters. ``weights_only``:
        the module's weights and ``hparams.json`` only (``load_from_checkpoint`` reads it; not resumable). The
        folder appears complete or not at all. Collective: call it on every process."""
        if self.module is None:
            raise NoModuleError("Saving a checkpoint is only possible if a model is attached to the Trainer: "
                                "Trainer.save_checkpoint() needs a module: call it during or after Trainer.fit().")
        if self.state.fn == "fit":
            self.nonfinite.check(self.accelerator)  # never write a checkpoint after a non-finite loss went unnoticed
        return save_weights(self, path) if check.flag("weights_only", weights_only) else \
            self.accelerator.save_state(os.fspath(path))

    def apply_seed(self) -> None:
        """``seed`` / ``deterministic`` applied (at the start of each ``fit``, before the loaders are prepared)."""
        if self.seed is not None:
            set_seed(self.seed, deterministic=self.deterministic)
        elif self.deterministic:
            torch.use_deterministic_algorithms(True)

    # -- published facts (read-only views; the Accelerator, the fit loop and RunState own the values) -----------
    logger = property(lambda self: self.loggers[0] if self.loggers else None, doc="The first of ``loggers``, or None.")

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The values logged with ``prog_bar=True``, as Python numbers (read from the device now: the bar reads them
        only when it redraws)."""
        return {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in self.progress_bar_values.items()}

    @property
    def precision(self) -> str:
        """The run's precision, one spelling whatever alias was passed ("32-true", "16-mixed", ...): "fp32", "fp16",
        "bf16", "fp16-true", "bf16-true" or "fp64-true", as the model summary prints it and as ``Trainer(precision=)``
        documents it. The Accelerator's mode is the owner (its "no" is "fp32" here)."""
        mode = self.accelerator.mixed_precision
        return "fp32" if mode == "no" else mode

    @property
    def global_step(self) -> int:
        """Applied optimizer steps (accumulation micro-steps and skipped fp16 steps do not count)."""
        return self.accelerator.step

    current_epoch = property(lambda self: self.fit_loop.epoch, doc="The epoch the fit is in (0-based).")
    is_global_zero = property(lambda self: self.accelerator.is_main_process, doc="True on the main process.")
    global_rank = property(lambda self: self.accelerator.process_index, doc="This process's rank among all of them.")
    local_rank = property(lambda self: self.accelerator.local_process_index, doc="This process's rank on its node.")

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        """The first ``ModelCheckpoint`` among the callbacks, or None."""
        from ..callbacks import ModelCheckpoint

        return next((c for c in self.callbacks if isinstance(c, ModelCheckpoint)), None)

    training = property(lambda self: self.state.stage == TRAIN.name, doc="True while training batches run.")
    sanity_checking = property(lambda self: self.state.stage is RunningStage.SANITY_CHECKING, doc="In the sanity check.")
    fitting = property(lambda self: self.state.fn == "fit", doc="True while a ``fit()`` call runs (setup to teardown).")

    @property
    def window_closed(self) -> bool:
        """True when the current (or last) training batch closed an accumulation window: an optimizer step was
        attempted for it (also one skipped for a non-finite loss or an fp16 overflow: see ``global_step``). Set
        once the batch's step has run; False again from the next ``on_train_batch_start`` and each ``fit``'s start."""
        return self.fit_loop.window_closed

    @property
    def epoch_finished(self) -> bool:
        """In ``on_train_epoch_end`` (and the end-of-epoch validation before it): True when the training epoch
        reached its last batch, False when a ``should_stop`` or ``max_steps`` stop ended it early (True also for
        a loader of unknown length, and for a resumed fit that only finishes an epoch whose batches were done)."""
        return self.fit_loop.epoch_finished

    @property
    def validation_count(self) -> int:
        """Validation runs completed in the current (or last) ``fit`` call (not the sanity check, not
        ``validate()``); counted once its epoch values are published, so its ``on_validation_end`` sees it."""
        return self.fit_loop.validation_count

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps ``fit`` will take: per epoch the training batches divided by :attr:`accumulate` (a
        last, short window counts), times the epochs, capped by ``max_steps``."""
        return self.run_setup.estimated_steps()

    dry_run = property(lambda self: self.options.dry_run, doc="A debugging run: nothing is saved or decided on.")

    def module_defines(self, name: str, module: Any = None) -> bool:
        """Whether ``module`` (default: the one being run) defines hook ``name`` itself (``defines_hook``'s test)."""
        module = self.module if module is None else module
        return module is not None and defines_hook(module, name, TrainingModule)

    max_epochs, max_steps = LimitView(), LimitView()

    @property
    def max_epochs_effective(self) -> int | None:
        """The epochs ``fit`` runs to: ``max_epochs``; with neither limit, one (or ``min_epochs``)."""
        return self.limits.epochs_to_run(self.options.min_epochs)

    @property
    def accumulate(self) -> int:
        """Micro-batches per optimizer step: the Accelerator's ``gradient_accumulation_steps``, stored there only
        (a ``GradientAccumulationScheduler`` changes it epoch by epoch during ``fit``)."""
        return self.accelerator.gradient_accumulation_steps

    @accumulate.setter
    def accumulate(self, value: int) -> None:
        self.accelerator.gradient_accumulation_steps = check_accumulation_steps(
            value, argument="trainer.accumulate = ...")

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``module.manual_backward(loss)``: the backward hooks around the module's ``backward`` (manual.py)."""
        manual_backward(self.module, loss, *args, **kwargs)

    def find_last_checkpoint(self) -> str | None:
        """The newest complete checkpoint for ``ckpt_path="last"``, or None: the one saved last (ties: ``last``, then
        more optimizer steps) in the folders of ``components.checkpoint_search_folders``."""
        return find_last_checkpoint(checkpoint_search_folders(self))
