"""`Trainer`: owns an Accelerator and runs fit / validate / test / predict through its public API.

Owns: the constructor contract of API.md §2 (validated here, once), setting up a run (seed, hooks, optimizers,
prepared objects, batch limits, resume) and the public attributes callbacks read. The loops are in
``loops.py``, the checkpoint contents and preemption in ``checkpointing.py``, ``self.log`` in ``logging.py``.

``global_step`` counts *applied* optimizer steps: micro-batches inside an accumulation window do not count, and
neither does an fp16 step skipped because the gradients overflowed (schedulers do not step then either).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch

from ..accelerator import Accelerator, DataLoaderConfiguration, set_seed
from ..accelerator import wait_for_checkpoints
from . import args as check
from .checkpointing import Preemption, TrainerCheckpointState, load_weights, restore
from .attributes import TrainerAttributes
from .components import agree_on_log_dirs, build_callbacks, build_loggers
from .hooks import HookDispatcher, merge_module_callbacks
from .logging import Results
from .evaluation import run_evaluation, run_predict
from .loops import FitLoop
from .module import TrainingModule
from .nonfinite import NonFiniteLoss
from .nonfinite import check_mode as check_nonfinite_mode
from .optim import LRSchedulerConfig
from .run import FitRun
from .setup import RunSetup
from .stages import PREDICT, STAGES, TRAIN, VALIDATE
from . import run_options


@dataclass
class RunState:
    """What the Trainer is doing: ``fn`` is the entry point ("fit", "validate", "test", "predict"), ``stage``
    the current part ("train", "validate", "test", "predict"), both None between runs."""

    fn: str | None = None
    stage: str | None = None


class Trainer(TrainerAttributes):
    """Runs the training loop of a :class:`TrainingModule` on an :class:`~stoker.Accelerator`.

    Args:
        max_epochs: Epochs to train (-1 or None: no limit). Neither this nor ``max_steps``: one epoch.
        max_steps: Applied optimizer steps to train (see ``global_step``); whichever limit comes first stops.
        accumulate: Micro-batches per optimizer step; a last, shorter window is averaged over its true length.
        precision: "fp32" | "fp16" | "bf16"; the mixed ones run the steps under autocast.
        clip_grad_norm: Clip the gradients' total norm to this (after fp16 unscaling), or None.
        clip_grad_value: Clip every gradient element to ``[-v, v]`` instead, or None.
        callbacks: ``Callback`` instances; a ``ModelCheckpoint`` and a ``ProgressBar`` are added when enabled and
            not given.
        logger: True (a TensorBoardLogger under ``default_root_dir/stoker_logs``), False, a Logger or a list.
        default_root_dir: Where logs, checkpoints and preemption checkpoints go.
        enable_checkpointing: Add a default ``ModelCheckpoint`` (a checkpoint per epoch, and ``last``).
        enable_progress_bar: Add a default ``ProgressBar``.
        enable_model_summary: Add a default ``ModelSummary`` (the layer table printed at the start of ``fit``).
        val_check_interval: Validate every this fraction of a training epoch (float) or every this many
            training batches (int).
        check_val_every_n_epoch: Validate in every n-th epoch only; None counts an int ``val_check_interval``
            across epochs.
        limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches: Batches per epoch, as
            a count or a fraction of the loader (None: all).
        log_every_n_steps: Send step values to the loggers every n optimizer steps.
        seed: Seed everything (``set_seed``) at the start of ``fit``, before the loaders get their shuffle seeds.
        deterministic: Ask torch for deterministic algorithms.
        accelerator: "auto" | "cpu" | "gpu" | "cuda" | "mps".
        devices: Processes to run: "auto", an int, or a list of GPU indices. More than one from a plain
            ``python script.py`` re-runs the script in that many processes; under torchrun the counts must match.
        strategy: The Accelerator's strategy: "auto" | "ddp" | "fsdp", or a strategy object.
        on_nonfinite_loss: When ``training_step`` returns a NaN/inf loss: "raise" (stop, naming the step and
            batch), "skip" (that optimizer step never happens) or "warn" (train on). "raise" and "warn" look at the
            losses only when values are logged, at epoch ends and before checkpoints (no per-step device->host
            wait); "skip" reads each window's losses before its optimizer step. See ``nonfinite.py``.
        precision also takes "32-true", "16-mixed", "bf16-mixed", and "bf16-true" / "16-true" (true half
            precision: the weights themselves in that dtype, inputs cast at the module's forward, no scaler).

    Lightning's names (README, "Coming from Lightning"): ``accumulate_grad_batches`` (alias of ``accumulate``),
    ``gradient_clip_val`` + ``gradient_clip_algorithm`` ("norm" | "value": ``clip_grad_norm`` / ``clip_grad_value``),
    ``num_nodes`` (checked against the launcher), ``min_epochs`` / ``min_steps`` (a stop request waits for them),
    ``max_time`` ("DD:HH:MM:SS", timedelta or dict: a ``Timer``), ``fast_dev_run`` (True or n: n batches of
    training and validation, one epoch, no checkpoints or loggers), ``num_sanity_val_steps`` (stoker's default 0:
    no sanity check; -1: every val batch), ``detect_anomaly``, ``benchmark`` (``cudnn.benchmark``),
    ``reload_dataloaders_every_n_epochs``, ``use_distributed_sampler`` (False only in one process: stoker always
    shards; False keeps your ``RandomSampler``, as Lightning does), ``float32_matmul_precision`` ("highest" | "high" | "medium": ``torch.set_float32_matmul_precision``).
    An alias together with its stoker name is an error; an unknown name gets a did-you-mean over both sets.

    Example:
        >>> trainer = Trainer(max_epochs=3, accumulate=2, precision="bf16", clip_grad_norm=1.0)
        >>> trainer.fit(module, train_loader, val_loader)          # doctest: +SKIP
        >>> trainer.fit(module, train_loader, val_loader, ckpt_path="last")  # resume after a preemption
        >>> trainer.test(module, test_loader)                      # doctest: +SKIP
        [{'test/acc': 0.97}]
    """

    def __init__(
        self, *, max_epochs: int | None = None, max_steps: int | None = None, accumulate: int = 1,
        precision: str = "fp32", clip_grad_norm: float | None = None, clip_grad_value: float | None = None,
        callbacks: list[Any] | Any | None = None, logger: Any = True, default_root_dir: str | os.PathLike = ".",
        enable_checkpointing: bool = True, enable_progress_bar: bool = True, val_check_interval: int | float = 1.0,
        check_val_every_n_epoch: int | None = 1, limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None, limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None, log_every_n_steps: int = 50, seed: int | None = None,
        deterministic: bool = False, accelerator: str = "auto", devices: Any = "auto", strategy: Any = "auto",
        enable_model_summary: bool = True, on_nonfinite_loss: str = "raise",
        # Lightning's names (README, "Coming from Lightning"): aliases first, then the ones stoker adds.
        accumulate_grad_batches: int | None = None, gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None, num_nodes: int = 1, min_epochs: int | None = None,
        min_steps: int | None = None, max_time: Any = None, fast_dev_run: int | bool = False,
        num_sanity_val_steps: int = 0, detect_anomaly: bool = False, benchmark: bool | None = None,
        reload_dataloaders_every_n_epochs: int = 0, use_distributed_sampler: bool = True,
        float32_matmul_precision: str | None = None, **unknown: Any,
    ) -> None:
        from ..accelerator import parse_precision

        if unknown:
            raise check.unknown_arguments(unknown, list(inspect.signature(Trainer.__init__).parameters)[1:-1])
        accumulate, clip_grad_norm, clip_grad_value = check.resolve_aliases(
            accumulate, clip_grad_norm, clip_grad_value, accumulate_grad_batches, gradient_clip_val,
            gradient_clip_algorithm)
        self.max_epochs = check.optional_int("max_epochs", max_epochs, 0, none_aliases=(-1,))
        self.max_steps = check.optional_int("max_steps", max_steps, 0, none_aliases=(-1,))
        accumulate = check.accumulation_steps("accumulate", accumulate)  # stored by the Accelerator only
        self.precision = parse_precision(precision, argument="Trainer(precision=...)")
        self.clip_grad_norm = check.clip_value("clip_grad_norm", clip_grad_norm)
        self.clip_grad_value = check.clip_value("clip_grad_value", clip_grad_value)
        if self.clip_grad_norm is not None and self.clip_grad_value is not None:
            raise ValueError(f"Trainer(clip_grad_norm={clip_grad_norm!r}, clip_grad_value={clip_grad_value!r}): "
                             "choose one way of clipping.")
        self.val_check_interval = check.val_check_interval(val_check_interval)
        self.check_val_every_n_epoch = check.optional_int("check_val_every_n_epoch", check_val_every_n_epoch, 1)
        if self.check_val_every_n_epoch is None and not isinstance(self.val_check_interval, int):
            raise ValueError("Trainer(check_val_every_n_epoch=None) counts val_check_interval across epochs, so it "
                             f"needs an int val_check_interval (batches); got {val_check_interval!r}.")
        self.limit_train_batches = check.batch_limit("limit_train_batches", limit_train_batches)
        self.limit_val_batches = check.batch_limit("limit_val_batches", limit_val_batches)
        self.limit_test_batches = check.batch_limit("limit_test_batches", limit_test_batches)
        self.limit_predict_batches = check.batch_limit("limit_predict_batches", limit_predict_batches)
        self.log_every_n_steps = check.positive_int("log_every_n_steps", log_every_n_steps)
        self.seed = check.seed_value(seed)
        self.deterministic = bool(deterministic)
        self.on_nonfinite_loss = check_nonfinite_mode(on_nonfinite_loss)
        self._nonfinite = NonFiniteLoss(self.on_nonfinite_loss)
        self.default_root_dir = os.fspath(default_root_dir)
        self.devices = devices
        lightning = run_options.apply(
            self, min_epochs=min_epochs, min_steps=min_steps, max_time=max_time, fast_dev_run=fast_dev_run,
            num_sanity_val_steps=num_sanity_val_steps, detect_anomaly=detect_anomaly, benchmark=benchmark,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
            use_distributed_sampler=use_distributed_sampler, float32_matmul_precision=float32_matmul_precision)
        enable_checkpointing = lightning.get("enable_checkpointing", enable_checkpointing)
        logger = lightning.get("logger", logger)
        cpu = check.accelerator_choice(accelerator)
        self._launch(accelerator)  # devices > 1 from a plain process: this re-runs the script in N processes
        self.num_nodes = check.num_nodes(num_nodes, self._processes_per_node(accelerator))

        self.accelerator = Accelerator(
            mixed_precision=self.precision, gradient_accumulation_steps=accumulate,
            project_dir=self.default_root_dir, cpu=cpu, strategy=strategy,
            # Every loader resumable; schedulers are stepped by the Trainer (once per applied optimizer step).
            # use_distributed_sampler=False (one process): the user's own samplers are kept, a RandomSampler too.
            dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True,
                                                      use_seedable_sampler=self.use_distributed_sampler),
            step_scheduler_with_optimizer=False,
        )
        self.accelerator.register_for_checkpointing(TrainerCheckpointState(self))
        self.callbacks = run_options.add_timer(
            build_callbacks(callbacks, enable_checkpointing, enable_progress_bar, enable_model_summary), self.max_time)
        if not self.use_distributed_sampler and self.accelerator.num_processes > 1:
            raise ValueError("Trainer(use_distributed_sampler=False) with several processes: stoker always gives "
                             "each process its own share of every loader (its samplers are resumable and seeded). "
                             "Drop the argument, and any DistributedSampler of your own.")
        self.loggers = build_loggers(logger, self.default_root_dir)
        agree_on_log_dirs(self.accelerator, self.loggers)

        self.state = RunState()
        self.fit_loop = FitLoop(self)
        self.should_stop = False
        self.callback_metrics: dict[str, Any] = {}
        self.logged_metrics: dict[str, Any] = {}
        self.progress_bar_metrics: dict[str, Any] = {}
        self.module: TrainingModule | None = None
        self.optimizers: list[Any] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.num_training_batches: int | float = float("inf")
        self.num_val_batches: list[int | float] = []
        self.num_test_batches: list[int | float] = []
        self.num_predict_batches: list[int | float] = []
        self._hooks: HookDispatcher | None = None
        self._train_results = Results(self, TRAIN.name)
        self._results = self._train_results
        self._preemption = Preemption()
        self._loaded_payload: dict[str, Any] | None = None
        self._setup = RunSetup(self)
        self._sanity_checking = False
        self.datamodule: Any = None
        self._fit_run: FitRun | None = None  # what set-up prepared for the current (or last) fit: run.py

    # -- construction helpers -------------------------------------------------------------------------------------
    def _launch(self, accelerator: str) -> None:
        """Makes this job ``devices`` processes: under torchrun, checks the count; from a plain ``python
        script.py`` with devices > 1, re-runs the script in that many processes (``accelerator/launch.py``)."""
        from ..accelerator import ensure_processes, resolve_num_processes

        ensure_processes(resolve_num_processes(self.devices, accelerator.lower()))

    def _processes_per_node(self, accelerator: str) -> int:
        from ..accelerator import resolve_num_processes

        return resolve_num_processes(self.devices, accelerator.lower())

    # -- entry points ---------------------------------------------------------------------------------------------
    def fit(self, module: TrainingModule | None = None, train_dataloaders: Any = None, val_dataloaders: Any = None,
            ckpt_path: str | os.PathLike | None = None, *, datamodule: Any = None, model: Any = None) -> None:
        """Trains ``module`` on the loaders given, or those of ``datamodule`` (a ``DataModule``, which may also be
        passed in ``train_dataloaders``' place); ``ckpt_path="last"`` resumes from the newest checkpoint (fresh
        start when none), ``"best"`` from the ModelCheckpoint's best one, or a checkpoint folder. ``model=`` is
        Lightning's name for ``module``."""
        module = self._setup.model_alias("fit", module, model)
        self._setup.check_module(module, fit=True)
        datamodule, train_dataloaders = self._setup.datamodule("fit", datamodule, train_dataloaders)
        if datamodule is not None and val_dataloaders is not None:
            raise ValueError("Trainer.fit() got both val_dataloaders and datamodule=; pass one of them.")

        def loaders() -> tuple[Any, list[Any]]:
            train = self._setup.loader_or_hook(train_dataloaders, module, TRAIN.loader_hook, "train_dataloaders")
            return train, self._setup.loaders(val_dataloaders, module, VALIDATE.loader_hook)

        self.datamodule = datamodule
        passed = (train_dataloaders is not None, val_dataloaders is not None)
        early = loaders() if datamodule is None else None  # without a data module, bad loaders fail before setup
        with self._run("fit", module, datamodule), run_options.anomaly_context(self):
            train, vals = early or loaders()
            run = self._fit_run = self._setup.prepare_fit(module, train, vals, passed)
            self._nonfinite.reset()
            self.fit_loop.validation_count, self.fit_loop.window_closed = 0, False
            restore(self, ckpt_path, run.train_loader)
            self._log_hyperparams()
            self._preemption.install(self.accelerator.num_processes)
            try:
                self.state.stage = TRAIN.name
                self._hooks.call("on_fit_start")
                run_options.run_sanity_check(self, run)
                self._hooks.call("on_train_start")
                self.fit_loop.run(run)
                self.state.stage = TRAIN.name
                self._hooks.call("on_train_end")
                self._hooks.call("on_fit_end")
            finally:
                self._preemption.uninstall()

    def validate(self, module: TrainingModule | None = None, dataloaders: Any = None,
                 ckpt_path: str | os.PathLike | None = None, *, datamodule: Any = None, verbose: bool = False,
                 model: Any = None) -> list[dict[str, float]]:
        """Runs ``validation_step`` over ``dataloaders`` (or ``datamodule``'s); one dict of epoch metrics per
        loader. ``ckpt_path``: "best", "last" or a folder whose weights are loaded first (None: current weights).
        ``verbose=True`` prints the metrics (Lightning's default; stoker's is quiet)."""
        module = self._setup.model_alias("validate", module, model, required=False)
        return run_options.report(self, "validate", verbose,
                                  self._evaluate("validate", module, dataloaders, ckpt_path, datamodule))

    def test(self, module: TrainingModule | None = None, dataloaders: Any = None,
             ckpt_path: str | os.PathLike | None = None, *, datamodule: Any = None, verbose: bool = False,
             model: Any = None) -> list[dict[str, float]]:
        """Runs ``test_step`` over ``dataloaders`` (or ``datamodule``'s); one dict of epoch metrics per loader."""
        module = self._setup.model_alias("test", module, model, required=False)
        return run_options.report(self, "test", verbose,
                                  self._evaluate("test", module, dataloaders, ckpt_path, datamodule))

    def predict(self, module: TrainingModule | None = None, dataloaders: Any = None,
                ckpt_path: str | os.PathLike | None = None, *, datamodule: Any = None,
                return_predictions: bool | None = None, model: Any = None) -> list[Any] | None:
        """``predict_step`` outputs for every batch (a list per loader when there are several); None with
        ``return_predictions=False`` (e.g. when a ``BasePredictionWriter`` writes them)."""
        module = self._setup.model_alias("predict", module, model, required=False)
        outputs = self._evaluate("predict", module, dataloaders, ckpt_path, datamodule)
        return None if return_predictions is False else outputs

    def _evaluate(self, fn: str, module: TrainingModule | None, dataloaders: Any, ckpt_path: Any,
                  datamodule: Any) -> list[Any]:
        module = self._setup.eval_module(module, fn)
        datamodule, dataloaders = self._setup.datamodule(fn, datamodule, dataloaders)
        stage = STAGES[fn]
        self.datamodule = datamodule
        early = self._setup.loaders(dataloaders, module, stage.loader_hook, required=True) \
            if datamodule is None else None
        with self._run(fn, module, datamodule):
            loaders = early or self._setup.loaders(dataloaders, module, stage.loader_hook, required=True)
            run = self._setup.prepare_eval(module, loaders, stage)
            load_weights(self, ckpt_path, run.model)
            self.state.stage = fn
            return run_predict(self, run.loaders) if stage is PREDICT else run_evaluation(self, fn, run.loaders)

    @contextlib.contextmanager
    def _run(self, fn: str, module: TrainingModule, datamodule: Any = None):  # noqa: ANN202 - context manager
        if self.state.fn is not None:
            raise RuntimeError(f"Trainer.{fn}() was called while Trainer.{self.state.fn}() is running; a Trainer "
                               "runs one thing at a time.")
        self.state.fn = fn
        self.module = module
        object.__setattr__(module, "_trainer", self)
        self.should_stop = False if fn == "fit" else self.should_stop
        self.callbacks = merge_module_callbacks(self.callbacks, module)  # module.configure_callbacks()
        self._hooks = HookDispatcher(self, module, self.callbacks)
        status = "success"
        try:
            self._setup.start_datamodule(datamodule, module, fn)  # prepare_data once per node, its setup(fn)
            self._hooks.call("setup", fn)
            yield
        except BaseException as exception:
            status = "interrupted" if isinstance(exception, (KeyboardInterrupt, SystemExit)) else "failed"
            self._hooks.call("on_exception", exception)
            raise
        finally:
            try:
                if datamodule is not None:
                    datamodule.teardown(stage=fn)
                self._hooks.call("teardown", fn)
            finally:
                self.state.fn = self.state.stage = None
                self._setup.teardown(module)
                if self.is_global_zero:
                    for logger in self.loggers:
                        logger.finalize(status)
                # Folders that checkpoints replaced are deleted in the background: gone when fit returns.
                wait_for_checkpoints(self.accelerator)

    # -- logging --------------------------------------------------------------------------------------------------
    def _send_to_loggers(self, values: dict[str, Any]) -> None:
        if not values:
            return
        self.logged_metrics.update(values)  # what was logged; the "epoch" label below is for the loggers only
        values = dict(values)
        # Outside fit (validate/test after it) the label is the epoch that produced the weights, as in the fit's
        # own end-of-epoch validation; current_epoch has already moved on to the next epoch by then.
        values.setdefault("epoch", self.current_epoch if self.state.fn == "fit" else self.fit_loop.trained_epoch)
        if self.is_global_zero:
            step = self.global_step
            for logger in self.loggers:
                logger.log_metrics(values, step=step)

    def _log_hyperparams(self) -> None:
        """At the start of ``fit``: the module's hyperparameters (when it has any), then its graph, to each logger
        (Lightning's order; ``Logger.log_graph`` does nothing unless a logger records graphs)."""
        if not self.is_global_zero:
            return
        hparams = dict(getattr(self.module, "hparams", {}) or {})
        for logger in self.loggers:
            if hparams:
                logger.log_hyperparams(hparams)
            logger.log_graph(self.module)

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike) -> str:
        """Writes a full resumable checkpoint (an Accelerator ``save_state`` folder) to ``path``; returns it.

        It holds the model, optimizers, schedulers, grad scaler, RNG states, loader positions, the loop position,
        callback states (by ``state_key``), ``on_save_checkpoint`` entries and the hyperparameters. The folder
        appears complete or not at all. Collective: call it on every process.
        """
        if self.module is None:
            raise RuntimeError("Trainer.save_checkpoint() needs a module: call it during or after Trainer.fit().")
        if self.state.fn == "fit":
            self._nonfinite.check(self)  # never write a checkpoint after a non-finite loss went unnoticed
        return self.accelerator.save_state(os.fspath(path))

    # -- run setup shortcuts used by the loops --------------------------------------------------------------------
    @property
    def _max_epochs_effective(self) -> int | None:
        if self.max_epochs is None and self.max_steps is None:
            return max(1, self.min_epochs or 0)
        return self.max_epochs

    def _seed(self) -> None:
        if self.seed is not None:
            set_seed(self.seed, deterministic=self.deterministic)
        elif self.deterministic:
            torch.use_deterministic_algorithms(True)
