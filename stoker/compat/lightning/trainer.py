"""`Trainer` with Lightning's names: ``stoker.Trainer``, the core :class:`stoker.trainer.Trainer` plus the
arguments, attributes and entry-point keywords a Lightning script uses, translated into the core's own objects.

Owns the translation only: aliases (``accumulate_grad_batches``, ``gradient_clip_val`` + ``gradient_clip_algorithm``)
become the core's arguments; ``min_epochs``, ``min_steps``, ``num_sanity_val_steps``,
``reload_dataloaders_every_n_epochs`` and ``use_distributed_sampler`` become a :class:`RunOptions`; ``max_time``
becomes a ``Timer`` callback; ``fast_dev_run`` becomes batch limits with no checkpoints or loggers;
``detect_anomaly``, ``benchmark`` and ``float32_matmul_precision`` become torch settings around ``fit``. The
argument checks are in ``args.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ..accelerate import Accelerator
from ...loggers.foreign import first_log_dir
from ...trainer.components import mark_main_process
from ...trainer.options import RunOptions
from ...trainer.profilers import Profiler, make_profiler
from ...trainer.iterables import CombinedLoader
from ...trainer.stages import PREDICT, TEST, TRAIN, VALIDATE
from ...trainer.core_trainer import Trainer as CoreTrainer
from . import args as check
from .strategies import registered_strategy
from .trainer_facts import RunFacts

if TYPE_CHECKING:
    import os

    from ...callbacks import Callback, Checkpoint, EarlyStopping, ProgressBar
    from ...loggers import Logger
    from ...trainer import TrainingModule
    from ...trainer.datamodule import DataModule
    from .strategies import Strategy

_CORE = [n for n in inspect.signature(CoreTrainer.__init__).parameters if n not in ("self", "options")]


class Trainer(RunFacts, CoreTrainer):
    """The core :class:`~stoker.trainer.Trainer` (every argument of it), with Lightning's names too.

    Lightning's names (README, "Coming from Lightning"): ``accumulate_grad_batches`` (alias of ``accumulate``),
    ``gradient_clip_val`` + ``gradient_clip_algorithm`` ("norm" | "value": ``clip_grad_norm`` / ``clip_grad_value``),
    ``num_nodes`` (checked against the launcher), ``min_epochs`` / ``min_steps`` (a stop request waits for them),
    ``max_time`` ("DD:HH:MM:SS", timedelta or dict: a ``Timer``), ``fast_dev_run`` (True or n: n batches of
    training and validation, one epoch, no checkpoints or loggers), ``num_sanity_val_steps`` (2 by default, as in
    Lightning; 0: no sanity check; -1: every val batch), ``detect_anomaly``, ``benchmark`` (``cudnn.benchmark``),
    ``reload_dataloaders_every_n_epochs``, ``use_distributed_sampler`` (False only in one process: stoker always
    shards; False keeps your ``RandomSampler``, as Lightning does), ``float32_matmul_precision`` ("highest" |
    "high" | "medium": ``torch.set_float32_matmul_precision``), ``inference_mode`` (True: ``validate``/``test``/
    ``predict`` on their own run under ``torch.inference_mode``; stoker's default False is ``torch.no_grad``,
    Lightning's default is True), ``barebones`` (True: no checkpoints, loggers, progress bar, model summary, sanity
    check or ``self.log``; arguments that would switch one on are refused), ``sync_batchnorm`` (``RunOptions``).
    ``PL_TRAINER_<ARGUMENT>`` environment variables are the arguments' defaults. An alias together with its stoker
    name is an error; an unknown name gets a did-you-mean over both sets.

    Example:
        >>> trainer = Trainer(max_epochs=3, accumulate_grad_batches=2, gradient_clip_val=1.0, fast_dev_run=2)
    """

    # trainer.accelerator answers Accelerate's names too (distributed_type, gather_for_metrics, ...), as before
    accelerator_class = Accelerator
    scaler = property(lambda self: self.accelerator.scaler, doc="The fp16 run's GradScaler (None otherwise).")
    dev_run_logger: Logger | None = None

    @check.defaults_from_environment(_CORE)  # PL_TRAINER_* variables
    def __init__(
        self, *, accumulate_grad_batches: int | None = None, gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None, num_nodes: int = 1, min_epochs: int | None = None,
        min_steps: int | None = None, max_time: Any = None, fast_dev_run: int | bool = False,
        num_sanity_val_steps: int | None = None, detect_anomaly: bool = False, benchmark: bool | None = None,
        reload_dataloaders_every_n_epochs: int = 0, use_distributed_sampler: bool = True, sync_batchnorm: bool = False,
        float32_matmul_precision: str | None = None, profiler: str | Profiler | None = None,
        overfit_batches: int | float = 0.0, inference_mode: bool = False, barebones: bool = False, **core: Any,
    ) -> None:
        core = check.core_arguments(core, _CORE, list(inspect.signature(Trainer.__init__).parameters)[1:-1])
        if "strategy" in core:  # Lightning's registered names that carry a DDP setting
            core["strategy"] = registered_strategy(core["strategy"])
        core["accumulate"], core["clip_grad_norm"], core["clip_grad_value"] = check.resolve_aliases(
            core.get("accumulate", 1), core.get("clip_grad_norm"), core.get("clip_grad_value"),
            accumulate_grad_batches, gradient_clip_val, gradient_clip_algorithm)
        check.note_ambiguous_values({**core, "overfit_batches": overfit_batches})
        self.barebones = check.flag("barebones", barebones)
        if self.barebones:
            check.barebones(core, {"num_sanity_val_steps": num_sanity_val_steps, "fast_dev_run": fast_dev_run,
                                   "detect_anomaly": detect_anomaly, "profiler": profiler})
        profiling = make_profiler(profiler)  # "simple" | "advanced" | "pytorch" | a Profiler: profilers.py
        n = check.fast_dev_run(fast_dev_run)
        self.fast_dev_run: int | bool = True if n == 1 else n if n else fast_dev_run  # Lightning's values
        self.overfit_batches = check.overfit_batches(overfit_batches)
        if self.overfit_batches:  # the same first batches of train and val every epoch, read in order
            core["limit_train_batches"] = core["limit_val_batches"] = self.overfit_batches
        self.max_time = None if self.fast_dev_run else check.max_time(max_time)
        self.detect_anomaly = check.flag("detect_anomaly", detect_anomaly)
        self.benchmark = check.flag("benchmark", benchmark, allow_none=True)
        self.float32_matmul_precision = check.matmul_precision(float32_matmul_precision)
        options = _run_options(n, bool(self.overfit_batches), min_epochs=min_epochs, min_steps=min_steps,
                               num_sanity_val_steps=num_sanity_val_steps, inference_mode=inference_mode,
                               reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
                               use_distributed_sampler=use_distributed_sampler, barebones=self.barebones,
                               sync_batchnorm=sync_batchnorm)
        if self.fast_dev_run:  # Lightning's debugging run writes nothing (a user's ModelCheckpoint stays, inert)
            self.dev_run_logger = _dev_run_logger(core)  # what trainer.logger answers; nothing is logged
            core.update(logger=False, enable_checkpointing=_has_checkpoint(core.get("callbacks")))
        super().__init__(**core, options=options)
        self.num_nodes = check.num_nodes(num_nodes, self.processes_per_node)
        if n:  # n batches everywhere, one epoch (after the core checked the values given)
            if not self.overfit_batches:
                self.limit_train_batches = self.limit_val_batches = n
            self.limit_test_batches = n
            self.limit_predict_batches = self.max_steps = n
            self.max_epochs, self.val_check_interval, self.check_val_every_n_epoch = 1, 1.0, 1
            self.val_check_seconds = None
        self._apply_torch_settings()
        self.callbacks = _add_timer(self.callbacks, self.max_time)
        self.profiler = profiling

    def _apply_torch_settings(self) -> None:
        if self.benchmark is not None:
            torch.backends.cudnn.benchmark = self.benchmark
        elif self.deterministic:
            torch.backends.cudnn.benchmark = False  # Lightning's rule: deterministic runs do not autotune
        if self.float32_matmul_precision is not None:
            torch.set_float32_matmul_precision(self.float32_matmul_precision)

    # -- Lightning's attribute names (views of what the core, its loop and the Accelerator own) ---------------------
    @property
    def min_epochs(self) -> int | None:
        return self.options.min_epochs

    @property
    def min_steps(self) -> int | None:
        return self.options.min_steps

    @property
    def num_sanity_val_steps(self) -> int | float:
        """Batches of each val loader checked before training; -1 ("all of them") reads as infinity, as Lightning's."""
        steps = self.options.num_sanity_val_steps
        return float("inf") if steps is None else steps

    @property
    def reload_dataloaders_every_n_epochs(self) -> int:
        return self.options.reload_dataloaders_every_n_epochs

    @property
    def use_distributed_sampler(self) -> bool:
        return self.options.use_distributed_sampler

    @property
    def _max_epochs_effective(self) -> int | None:  # the name tests of Lightning's min_epochs rule read
        return self.max_epochs_effective

    @property
    def lightning_module(self) -> TrainingModule | None:
        return self.module

    @property
    def train_dataloader(self) -> Any:
        """The train loader the current (or last) ``fit`` was given, as Lightning's: the loader, or the list / dict
        of several (a ``CombinedLoader``'s iterables), after ``overfit_batches`` rebuilt a shuffling one in order;
        None before a fit. The prepared loader, whose ``state_dict()`` is the run's position, is
        ``trainer.fit_run.train_loader``."""
        loaders = self.run_setup.stage_loaders.get(TRAIN.name)
        if not loaders:
            return None
        return loaders[0].iterables if isinstance(loaders[0], CombinedLoader) else loaders[0]

    @property
    def accumulate_grad_batches(self) -> int:
        """Lightning's name for ``accumulate`` (micro-batches per optimizer step; a scheduler may change it)."""
        return self.accumulate

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        self.accumulate = value

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        """The first ``ProgressBar`` among the callbacks, or None (``enable_progress_bar=False``)."""
        from ...callbacks import ProgressBar

        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    @property
    def val_dataloaders(self) -> Any:
        """The loader (or list of loaders) the latest validation was given: ``fit``'s or ``validate``'s; None."""
        return self._given_loaders(VALIDATE.name)

    @property
    def test_dataloaders(self) -> Any:
        """The loader (or list of loaders) the latest ``test`` was given, or None."""
        return self._given_loaders(TEST.name)

    @property
    def predict_dataloaders(self) -> Any:
        """The loader (or list of loaders) the latest ``predict`` was given, or None."""
        return self._given_loaders(PREDICT.name)

    def _given_loaders(self, stage: str) -> Any:
        return self.run_setup.given_loaders(stage)

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """As Lightning routes ``module.manual_backward``: through ``trainer.strategy.backward`` (which runs the
        core's hooks and the module's ``backward``), so a patched or subclassed ``Strategy.backward`` sees it."""
        self.strategy.backward(loss, None, *args, **kwargs)

    @property
    def strategy(self) -> Strategy:
        """Lightning's ``trainer.strategy`` (``root_device``, ``world_size``, ``barrier``, ``broadcast``, ``reduce``)
        over this Trainer's Accelerator."""
        from .strategies import Strategy

        return Strategy(self)

    @property
    def enable_validation(self) -> bool:
        """Whether ``fit`` validates: the module defines ``validation_step`` and ``limit_val_batches`` is not 0."""
        from ...trainer.hooks import defines_hook
        from ...trainer import TrainingModule

        module = self.module
        return (module is not None and defines_hook(module, VALIDATE.step, TrainingModule)
                and self.limit_val_batches != 0)

    @property
    def logger(self) -> Logger | None:
        """The first logger; in a ``fast_dev_run`` asked to log, a `DummyLogger` (``trainer.loggers`` is empty)."""
        return self.loggers[0] if self.loggers else self.dev_run_logger

    @logger.setter
    def logger(self, logger: Logger | None) -> None:
        """``trainer.logger = x``: the only logger (None: none), told if it runs on the main process, as ours are."""
        self.loggers = [] if logger is None else [logger]
        mark_main_process(self.loggers, self.is_global_zero)
        self.dev_run_logger = None

    @property
    def loggers(self) -> list[Logger]:
        """The loggers (an empty list when there are none)."""
        return self.__dict__["loggers"]

    @loggers.setter
    def loggers(self, loggers: list[Logger] | None) -> None:
        # Lightning's setter takes None for "no loggers": the list is never None, so `for logger in ...` holds
        self.__dict__["loggers"] = [] if loggers is None else loggers if isinstance(loggers, list) else list(loggers)

    @property
    def log_dir(self) -> str:
        """The first logger's folder, else ``default_root_dir``."""
        return first_log_dir(self.loggers) or self.default_root_dir

    @property
    def checkpoint_callbacks(self) -> list[Checkpoint]:
        """Every ``Checkpoint`` callback (``ModelCheckpoint`` and your own) among the callbacks."""
        from ...callbacks import Checkpoint

        return [c for c in self.callbacks if isinstance(c, Checkpoint)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        """The first ``EarlyStopping`` among the callbacks, or None."""
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        """Every ``EarlyStopping`` among the callbacks."""
        from ...callbacks import EarlyStopping

        return [c for c in self.callbacks if isinstance(c, EarlyStopping)]

    @property
    def validating(self) -> bool:
        return self.state.stage == VALIDATE.name

    @property
    def testing(self) -> bool:
        return self.state.stage == TEST.name

    @property
    def predicting(self) -> bool:
        return self.state.stage == PREDICT.name

    # -- entry points with Lightning's keywords (model=, verbose=) --------------------------------------------------
    def fit(self, module: TrainingModule | None = None, train_dataloaders: Any = None, val_dataloaders: Any = None,
            ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None,
            model: TrainingModule | None = None, weights_only: bool | None = None) -> None:
        """:meth:`stoker.trainer.Trainer.fit`; ``model=`` is Lightning's name for ``module``; ``detect_anomaly=True``
        runs it in ``torch.autograd.detect_anomaly`` (slow); ``weights_only`` (all four): ``args.entry_flags``."""
        check.entry_flags("fit", weights_only=weights_only)
        module = _model_alias("fit", module, model)
        anomaly = torch.autograd.detect_anomaly(check_nan=True) if self.detect_anomaly else contextlib.nullcontext()
        with anomaly:
            super().fit(module, train_dataloaders, val_dataloaders, ckpt_path, datamodule=datamodule)

    def validate(self, module: TrainingModule | None = None, dataloaders: Any = None,
                 ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None,
                 verbose: bool = False, model: TrainingModule | None = None,
                 weights_only: bool | None = None) -> list[dict[str, float]]:
        """:meth:`stoker.trainer.Trainer.validate`; ``verbose=True`` prints the metrics (Lightning's default;
        stoker's is quiet)."""
        check.entry_flags("validate", verbose, weights_only)
        module = _model_alias("validate", module, model)
        return self._report("validate", verbose, super().validate(module, dataloaders, ckpt_path,
                                                                  datamodule=datamodule))

    def test(self, module: TrainingModule | None = None, dataloaders: Any = None,
             ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None,
             verbose: bool = False, model: TrainingModule | None = None,
             weights_only: bool | None = None) -> list[dict[str, float]]:
        """:meth:`stoker.trainer.Trainer.test`, with ``verbose`` and ``model=`` as in :meth:`validate`."""
        check.entry_flags("test", verbose, weights_only)
        module = _model_alias("test", module, model)
        return self._report("test", verbose, super().test(module, dataloaders, ckpt_path, datamodule=datamodule))

    def predict(self, module: TrainingModule | None = None, dataloaders: Any = None,
                ckpt_path: str | os.PathLike | None = None, *, datamodule: DataModule | None = None,
                return_predictions: bool | None = None, model: TrainingModule | None = None,
                weights_only: bool | None = None) -> list[Any] | None:
        """:meth:`stoker.trainer.Trainer.predict`, with ``model=``."""
        check.entry_flags("predict", weights_only=weights_only)
        module = _model_alias("predict", module, model)
        return super().predict(module, dataloaders, ckpt_path, datamodule=datamodule,
                               return_predictions=return_predictions)

    def _report(self, fn: str, verbose: bool, results: list[dict[str, float]]) -> list[dict[str, float]]:
        """``verbose=True``: prints each loader's metrics on the main process, then the closing line."""
        if verbose and self.is_global_zero:
            for i, values in enumerate(results):
                title = f"{fn} metrics" + (f" (dataloader {i})" if len(results) > 1 else "")
                width = max([len(title), *(len(k) for k in values)])
                print(title)
                for name, value in sorted(values.items()):
                    print(f"  {name:<{width}}  {value:.6g}")
            self.run_report.say(fn)  # the closing line, as fit's, after the metrics
        return results


def _model_alias(fn: str, module: TrainingModule | None, model: TrainingModule | None) -> TrainingModule | None:
    """``module``, or Lightning's ``model=`` keyword for it (not both)."""
    if model is not None and module is not None:
        raise TypeError(f"Trainer.{fn}() got both module and model=; model is Lightning's name for the same "
                        "argument. Pass one of them.")
    return module if model is None else model


def _run_options(dev_run: int, overfit: bool, *, min_epochs: Any, min_steps: Any, num_sanity_val_steps: Any,
                 reload_dataloaders_every_n_epochs: Any, use_distributed_sampler: Any, inference_mode: Any,
                 barebones: bool, sync_batchnorm: Any) -> RunOptions:
    """The core's run options from Lightning's arguments (checked, with Lightning's spellings: ``min_steps=-1``
    is None; ``num_sanity_val_steps=None`` is the core's default; none under ``fast_dev_run`` or ``barebones``)."""
    sanity = check.sanity_steps(num_sanity_val_steps, default=RunOptions.num_sanity_val_steps)
    return RunOptions(
        min_epochs=check.optional_int("min_epochs", min_epochs, 0),
        min_steps=check.optional_int("min_steps", min_steps, 0, none_aliases=(-1,)),
        num_sanity_val_steps=0 if dev_run or barebones else sanity,
        # None is Lightning's 0; RunOptions checks the rest
        reload_dataloaders_every_n_epochs=0 if reload_dataloaders_every_n_epochs is None else
        reload_dataloaders_every_n_epochs,
        use_distributed_sampler=check.flag("use_distributed_sampler", use_distributed_sampler),
        in_order_fit_loaders=overfit, dry_run=bool(dev_run), sync_batchnorm=sync_batchnorm,  # RunOptions checks it
        inference_mode=check.flag("inference_mode", inference_mode), record_logged_values=not barebones)


def _add_timer(callbacks: list[Callback], max_time: Any) -> list[Callback]:
    """``max_time``: a ``Timer(duration=max_time)`` unless the user gave a ``Timer`` (theirs is kept, as in
    Lightning, with a warning)."""
    if max_time is None:
        return callbacks
    from ...callbacks import Timer

    if any(isinstance(c, Timer) for c in callbacks):
        warnings.warn("Trainer(max_time=...) was passed together with a Timer callback; the Timer callback's "
                      "duration is used.", stacklevel=3)
        return callbacks
    return [*callbacks, Timer(duration=max_time, interval="step")]


def _dev_run_logger(core: dict[str, Any]) -> Logger | None:
    """``fast_dev_run``'s ``trainer.logger``: a `DummyLogger` (writes nothing) in place of any the user asked for."""
    if core.get("logger", True) in (False, None, []):
        return None
    from ...loggers.logger import DummyLogger

    return DummyLogger(core.get("default_root_dir") or ".")


def _has_checkpoint(callbacks: Any) -> bool:
    from ...callbacks import Checkpoint

    listed = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    return any(isinstance(c, Checkpoint) for c in listed)
