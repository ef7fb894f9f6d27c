"""Setting up a Trainer run: checking the module, preparing it and its optimizers through the Accelerator.

Owns: the checks that fail before any work (a module without ``training_step`` / ``configure_optimizers``, a compiled
module, a data module passed twice), the preparation order (model -> ``configure_optimizers`` -> optimizers and
schedulers, so optimizers see the prepared, possibly sharded, parameters), and where a second ``fit`` continues.
When the loaders are asked for, and their checks and batch limits: ``loader_requests.py``.
"""

from __future__ import annotations

import math
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..user_frame import user_stacklevel
from .batchnorm_sync import check_device, restore_batchnorm, sync_batchnorm
from .datamodule import DataModule, prepare_data_once
from .iterables import CombinedLoader
from .hooks import defines_hook, overrides
from .loader_requests import LoaderRequests, validates_in
from .manual import check_manual, wrap_optimizers
from .mode_hooks import warn_eval_modules
from .module import TrainingModule
from .optim import parse_optimizers
from .run import EvalRun, FitRun
from .stages import STAGES, VALIDATE, Stage
from .step_args import check_no_optimizer_idx, step_call

if TYPE_CHECKING:
    from .parts import TrainerParts


class MissingModuleError(TypeError, ValueError):
    """``validate``/``test``/``predict`` given no module while the Trainer has none: a missing argument, so a
    ``TypeError`` as for ``fit()`` (and Lightning), and the ``ValueError`` stoker raised for it before."""


class MissingStepError(TypeError, ValueError):
    """A module without a method the stage needs (``training_step``, ``configure_optimizers``, ``validation_step``
    for ``validate``...): a ``TypeError`` by stoker's rule, and the ``ValueError`` of Lightning's
    ``MisconfigurationException`` that Lightning scripts catch for it."""


class RunSetup:
    """The Trainer's set-up steps (one instance per Trainer)."""

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        self.last_model: Any = None  # the model prepared last (fit or evaluation): a new module frees it first
        self._routed: tuple[Any, Any] | None = None
        self._batchnorm: dict[str, Any] = {}  # the layers sync_batchnorm swapped out during the current fit
        self.requests = LoaderRequests(trainer)  # when the loaders are asked for, and their preparation
        self.resumed = False  # the current fit restored a checkpoint (its train loader's position came with it)
        self.ckpt_path: str | None = None  # the checkpoint the current (or last) stage loaded, None: none
        self.module_passed = True  # the current evaluation was given its module (else: the fitted one)

    @property
    def stage_loaders(self) -> dict[str, list[Any]]:
        """Stage name -> the loaders its latest run was given (before preparation): Lightning's
        ``trainer.val_dataloaders`` / ``test_dataloaders`` / ``predict_dataloaders``."""
        return self.requests.stage_loaders

    def given_loaders(self, stage: str) -> Any:
        """What the latest run of ``stage`` was given, as Lightning's ``trainer.val_dataloaders`` & co. give it back:
        the loader, the list of several, the dict (a ``CombinedLoader``'s iterables); None before a run."""
        loaders, shaped = self.requests.stage_loaders.get(stage), self.requests.stage_shapes.get(stage)
        if isinstance(shaped, CombinedLoader):
            return shaped.iterables
        if shaped is not None or not loaders:
            return shaped
        return loaders[0] if len(loaders) == 1 else list(loaders)

    def begin_fit(self, module: TrainingModule, train: Any, vals: Any) -> None:
        """A new fit's loaders: those passed are checked now, the hooks are asked later (``loader_requests.py``)."""
        self.resumed = False
        self.requests.begin_fit(module, train, vals)

    # -- checks -----------------------------------------------------------------------------------------------------
    def check_module(self, module: Any, fit: bool) -> TrainingModule:
        """``module`` checked (a compiled module: the module itself, its forward compiled); returns it."""
        if module is None and fit:
            raise TypeError("Trainer.fit() needs the TrainingModule to train: Trainer.fit(module, ...).")
        module = from_compiled(module)
        if not isinstance(module, TrainingModule):
            raise TypeError(f"`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got "
                            f"`{type(module).__qualname__}`: Trainer expects a stoker.TrainingModule, got "
                            f"{type(module).__name__}. Subclass TrainingModule and define training_step and "
                            "configure_optimizers.")
        if fit:
            for name, what in (("training_step", "return the loss of a batch"),
                               ("configure_optimizers", "return an optimizer")):
                if not defines_hook(module, name, TrainingModule):
                    raise MissingStepError(f"No `{name}()` method defined: {type(module).__name__} does not define "
                                           f"{name}(); Trainer.fit needs it to {what}.")
        return module

    def eval_module(self, module: Any, fn: str) -> TrainingModule:
        self.module_passed = module is not None
        module = from_compiled(module) if module is not None else self.trainer.module
        if module is None:
            raise MissingModuleError(f"`Trainer.{fn}()` requires a `LightningModule` when it hasn't been passed in a "
                                     f"previous run: Trainer.{fn}() needs a module: pass it, or call fit first.")
        module = self.check_module(module, fit=False)
        stage = STAGES[fn]
        if stage.step_required and not defines_hook(module, stage.step, TrainingModule):
            raise MissingStepError(f"No `{stage.step}()` method defined: Trainer.{fn}() needs "
                                   f"{type(module).__name__}.{stage.step}(batch, batch_idx).")
        checks = [(stage.step, "a method")] + [("forward", "self(batch) in predict_step")] * (fn == "predict")
        for name, needed in checks:
            if getattr(module, name, True) is None:  # set to None on the instance or class: Lightning's rule
                raise MissingStepError(f"`{name}` cannot be None: Trainer.{fn}() needs {name} ({needed}) of "
                                       f"{type(module).__name__}.")
        return module

    # -- data modules -----------------------------------------------------------------------------------------------
    def datamodule(self, fn: str, datamodule: Any, dataloaders: Any) -> tuple[Any, Any]:
        """``(datamodule, dataloaders)`` for an entry point: a ``DataModule`` passed in the loaders' place is taken
        as the data module (as Lightning does); both at once is an error."""
        if isinstance(dataloaders, DataModule) and datamodule is None:
            dataloaders, datamodule = None, dataloaders
        if datamodule is None:
            return None, dataloaders
        if not isinstance(datamodule, DataModule):
            raise TypeError(f"Trainer.{fn}(datamodule=...) got a {type(datamodule).__name__}; expected a "
                            "stoker.DataModule (Lightning's LightningDataModule contract).")
        if dataloaders is not None:
            raise ValueError(f"Trainer.{fn}() got both dataloaders and datamodule=; pass one of them: the data "
                             "module's loader methods, or the loaders themselves.")
        return datamodule, None

    def start_datamodule(self, datamodule: Any, module: Any, fn: str) -> None:
        """``prepare_data`` once per node (data module, then module), then the data module's ``setup(fn)``."""
        t = self.trainer
        t.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = t
            prepare_data_once(datamodule, t.accelerator)
        if defines_hook(module, "prepare_data", TrainingModule):
            prepare_data_once(module, t.accelerator)
        if datamodule is not None:
            datamodule.setup(stage=fn)

    def reload_loaders(self, run: FitRun, epoch: int) -> None:
        """At the start of ``epoch``: the train loader asked for again when ``reload_dataloaders_every_n_epochs``
        says so (``loader_requests.py``)."""
        self.requests.train(run)

    # -- fit --------------------------------------------------------------------------------------------------------
    def prepare_fit(self, module: TrainingModule, passed: tuple[bool, bool] = (False, False)) -> FitRun:
        """Prepares what ``fit`` needs before its loaders (asked for later: ``loader_requests.py``), in order, and
        returns it as the run the loops get. ``passed``: whether the train / val loaders were ``fit``'s arguments
        (else they come from hooks)."""
        t = self.trainer
        acc = t.accelerator
        automatic = bool(getattr(module, "automatic_optimization", True))
        if not automatic:
            check_manual(t, module)
        t.apply_seed()  # before the loaders are prepared: their shuffle seeds are drawn from the global RNG then
        if acc.holds_prepared:  # a previous stage's objects (a first fit has none: skip free_memory's gc.collect)
            acc.free_memory(reset_step=False)  # a second fit continues its step count
        if t.options.sync_batchnorm and acc.num_processes > 1:  # before DDP wraps it (batchnorm_sync.py)
            check_device(acc.device)
            self._batchnorm = sync_batchnorm(module)
        # autocast_forward=False: the loops enter the precision's autocast around each step themselves (one mechanism)
        model = self.last_model = acc.prepare_model(module, autocast_forward=False)
        run = self.requests.run = FitRun(
            model=model, train_loader=None, val_loaders=[], val_enabled=self.requests.validates(module),
            val_check_batch=None, training_step=self._route(module, model, automatic), automatic=automatic,
            train_from_hooks=not passed[0], val_from_hooks=not passed[1])
        optimizers, configs = parse_optimizers(module.configure_optimizers(), manual=not automatic,
                                               own_step=overrides(module, "lr_scheduler_step"))
        if len(optimizers) > 1 and automatic:
            raise ValueError(
                f"{type(module).__name__}.configure_optimizers() returned {len(optimizers)} optimizers ("
                + ", ".join(type(o).__name__ for o in optimizers) + "), but automatic optimization steps every "
                "optimizer on the same loss. To step several optimizers (e.g. a GAN's generator and "
                "discriminator), set `automatic_optimization = False` on the module and step them yourself in "
                "training_step (manual optimization, as in Lightning 2); for one loss, return one optimizer, with "
                "several parameter groups if they need different settings."
            )
        t.prepared_optimizers = [acc.prepare_optimizer(o) for o in optimizers]
        t.optimizers = [o.optimizer for o in t.prepared_optimizers]
        # Prepared (so the Accelerator's checkpoints hold them), and kept in the configs as the module returned them,
        # as in Lightning: the Trainer's Accelerator prepares schedulers with step_scheduler_with_optimizer=False,
        # so the wrapper's step would only pass the call on. A scheduler of another kind (manual optimization) is
        # the module's own business.
        for config in configs:
            if config.is_torch_scheduler:
                acc.prepare_scheduler(config.scheduler)
        t.lr_scheduler_configs = configs
        run.step_schedulers = [c for c in configs if c.interval == "step"]
        run.manual_optimizers = wrap_optimizers(t, model)
        return run

    def train_loader(self, run: FitRun) -> Any:
        """The fit's prepared train loader, asked for now if it was not yet; the first time, a second ``fit`` on
        this Trainer moves it to where the first one stopped (unless a checkpoint was restored)."""
        first = run.train_loader is None
        loader = self.requests.train(run)
        if first and not self.resumed:
            self.continue_position(loader)
        return loader

    def start_training(self, run: FitRun) -> bool:
        """After the sanity check: the train loader is asked for, also when the fit loop has nothing left to do
        (Lightning's order); then False, the val loaders are not asked for and ``num_val_batches`` reads what they
        gave (``[]`` if never asked). Otherwise the loaders of :meth:`training_loaders`, Lightning's warning about
        parts of the module left in eval mode (`warn_eval_modules`), and True."""
        self.train_loader(run)
        if self.trainer.fit_loop.done:
            self.trainer.num_val_batches = list(run.val_batches)
            return False
        self.training_loaders(run)
        if self.trainer.is_global_zero:
            warn_eval_modules(self.trainer.module)
        return True

    def training_loaders(self, run: FitRun) -> None:
        """Before ``on_train_start``: the train loader, and the val loaders too when the first epoch validates and
        the sanity check did not ask for them (so that their batch counts are known from the start)."""
        self.train_loader(run)  # resumed: asked for again here when a reload is due at the resumed epoch's start
        requests = self.requests
        if run.val_enabled and not requests.val_asked and validates_in(self.trainer, self.trainer.current_epoch):
            requests.val(run)

    def val_loaders(self, run: FitRun) -> list[Any]:
        """The fit's prepared val loaders, asked for at its first validation (and on reload); empty: none."""
        return self.requests.val(run)

    def resume_from(self, run: FitRun, path: str | None) -> None:
        """Before restoring the checkpoint ``path`` (None: none): the train loader is asked for now, since its
        position comes back with the checkpoint."""
        self.resumed = path is not None
        if not self.resumed:
            return
        loop = self.trainer.fit_loop
        epoch, loop.epoch = loop.epoch, self._asked_at(run, path, loop.epoch)
        try:  # the hook reads the epoch it was asked at (current_epoch) in the interrupted fit
            self.requests.train(run)
        finally:
            loop.epoch = epoch

    def _asked_at(self, run: FitRun, path: str, epoch: int) -> int:
        """The epoch at which the interrupted fit asked for the train loader it was reading at the checkpoint
        ``path`` (``reload_dataloaders_every_n_epochs=n`` asks again at epochs 0, n, 2n...); ``epoch`` without
        reloads."""
        from .loading import trainer_checkpoint, trainer_own

        n = self.trainer.options.reload_dataloaders_every_n_epochs
        payload = trainer_checkpoint(path, check_all=False) if n and run.train_from_hooks else None
        if payload is None:
            return epoch
        saved = trainer_own(payload)[0]["loops"]["fit_loop"]
        ended = saved["phase"] == "end" and saved.get("end_hooks_started", True)  # resumes at the next epoch
        at_start = ended or (saved["phase"] == "batches" and not saved["batches_done"] and
                             not saved.get("val_pending", False))
        resumed_epoch = int(saved["epoch"]) + int(ended)
        return max((resumed_epoch - 1 if at_start else resumed_epoch) // n * n, 0)

    def continue_position(self, loader: Any) -> None:
        """A second ``fit`` on the same Trainer continues where the first stopped (same epoch and batch):
        ``loader`` (the new fit's train loader) is moved there."""
        loop = self.trainer.fit_loop
        if loader is None:  # not asked for yet: train_loader() moves it when it is
            return
        if loop.phase == "batches" and loop.batches_done and not loop.epoch_batches_finished:
            state = loader.state_dict()
            if "loader" not in state:  # map-style: the position is (epoch, batches); iterable ones restart
                loader.load_state_dict({**state, "epoch": loop.epoch, "batches_yielded": loop.batches_done})
                return
            loop.epoch, loop.batches_done = loop.epoch + 1, 0

    def estimated_steps(self) -> int | float:
        t = self.trainer
        run = self.requests.run
        if t.state.fn == "fit" and run is None:  # setup() / configure_model(): fit has prepared nothing yet
            warnings.warn("trainer.estimated_stepping_batches is read before fit has prepared its train loader (in "
                          "setup or configure_model), so it is unknown there and reads inf. Read it in "
                          "configure_optimizers or later, as a scheduler's total steps.", UserWarning,
                          stacklevel=user_stacklevel())
        if t.state.fn == "fit" and run is not None and run.train_loader is None:
            self.train_loader(run)  # its length is needed now (e.g. a scheduler's total steps)
        n = t.num_training_batches
        per_epoch = math.inf if math.isinf(n) else math.ceil(n / t.accumulate)
        epochs = t.max_epochs_effective
        total = per_epoch * epochs if epochs is not None else math.inf
        if t.limits.max_steps is not None:
            total = min(total, t.limits.max_steps)
        return int(total) if not math.isinf(total) else total

    # -- evaluation -------------------------------------------------------------------------------------------------
    def prepare_eval(self, module: TrainingModule, stage: Stage) -> EvalRun:
        """Prepares ``module`` for ``stage`` (validate, test or predict); its loaders are asked for later
        (:meth:`eval_loaders`)."""
        t = self.trainer
        if stage is not VALIDATE:  # Lightning: num_val_batches outside a validate run is the last fit's
            t.num_val_batches = list(t.fit_run.val_batches) if t.fit_run is not None else []
        acc = t.accelerator
        if acc.holds_prepared and (self.last_model is None or acc.unwrap_model(self.last_model) is not module):
            acc.free_memory(reset_step=False)  # a second fit continues its step count
        # The model fit prepared comes back as it was; the evaluation loops enter the autocast around each step.
        model = self.last_model = acc.prepare_model(module, evaluation_mode=True, autocast_forward=False)
        return EvalRun(model=model, loaders=[])

    def eval_loaders(self, run: EvalRun, value: Any, module: TrainingModule, stage: Stage) -> list[Any]:
        """``stage``'s loaders asked for (when its run starts, after the weights are loaded), prepared, limited; a
        stage limited to zero batches asks the module for none (Lightning's rule) and runs nothing."""
        if value is None and getattr(self.trainer, stage.limit) == 0:
            setattr(self.trainer, stage.count, [])
            self.trainer.stage_record.loader_batches[stage.name] = []
            run.loaders = []
            return run.loaders
        run.loaders = self.requests.prepare(stage, self.requests.requested(value, module, stage.loader_hook, True))
        return run.loaders

    # -- several processes ------------------------------------------------------------------------------------------
    def _route(self, module: TrainingModule, model: Any, automatic: bool) -> Callable[[Any, int], Any]:
        """The call that runs ``training_step``. Under DDP it must run inside the wrapper's forward (which arms
        gradient sync): the module's forward learns to dispatch ``model(batch, idx, _stoker_step=...)`` to it."""
        check_no_optimizer_idx(module)
        step = step_call(module.training_step)  # a training_step(self, batch) is called without batch_idx
        if model is module or not automatic:  # manual optimization syncs gradients itself (manual.py)
            return step
        inner = module.__dict__.get("forward")

        def forward(*args: Any, _stoker_step: str | None = None, **kwargs: Any) -> Any:
            if _stoker_step is not None:
                return step(*args, **kwargs)
            return (inner or type(module).forward.__get__(module))(*args, **kwargs)

        module.forward = forward
        self._routed = (module, inner)
        return lambda batch, batch_idx: model(batch, batch_idx, _stoker_step="training_step")

    def teardown(self, module: Any = None) -> None:
        """Gives ``module`` back as it came: without the training-step route and without the autocast wrapper
        that preparing put on its forward, so the precision of this run does not leak into the next one, and with
        the batch-norm layers a ``sync_batchnorm`` fit swapped."""
        if self._routed is not None:
            routed, inner = self._routed
            self._routed = None
            if inner is None:
                routed.__dict__.pop("forward", None)
            else:
                routed.forward = inner
        if module is not None:
            self.trainer.accelerator.unwrap_model(module, keep_fp32_wrapper=False)
            restore_batchnorm(module, self._batchnorm)
        self._batchnorm = {}


def from_compiled(module: Any) -> Any:
    """``torch.compile(module)`` of a TrainingModule (Lightning's recipe: ``trainer.fit(torch.compile(model))``): the
    module itself, with its ``forward`` compiled by the same compiler settings, so ``self(x)`` in the steps runs
    compiled while hooks, ``self.log`` and checkpoints see the module. Done once per compiled wrapper, and kept
    after the call. Anything else is returned as it is."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing can have been compiled
    if eval_frame is None or not isinstance(module, eval_frame.OptimizedModule):
        return module
    inner = module._orig_mod
    if not isinstance(inner, TrainingModule):
        return module  # check_module says what is wrong
    compiled_by = inner.__dict__.get("_stoker_compiled_by")
    if compiled_by is None or compiled_by() is not module:
        inner.forward = module.dynamo_ctx(type(inner).forward.__get__(inner))
        inner.__dict__["_stoker_compiled_by"] = weakref.ref(module)  # not a submodule (nn.Module's setattr would)
    return inner
