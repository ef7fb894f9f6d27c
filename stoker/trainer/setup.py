"""Setting up a Trainer run: checking the module and loaders, preparing everything through the Accelerator.

Owns: the checks that fail before any work (a module without ``training_step`` / ``configure_optimizers``, loaders
that are not DataLoaders, an empty or endless train loader without a stopping rule), the preparation order
(model -> loaders -> ``configure_optimizers`` -> optimizers and schedulers, so optimizers see the prepared,
possibly sharded, parameters), batch limits, and the validation schedule in batches.
"""

from __future__ import annotations

import math
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from . import args as check
from .datamodule import DataModule, defines, prepare_data_once
from .hooks import defines_hook
from .iterables import CombinedLoader, check_iterable, prepare_loader, replace_loader
from .manual import check_manual, wrap_optimizers
from .module import TrainingModule
from .optim import parse_optimizers
from .run import EvalRun, FitRun
from .stages import STAGES, TRAIN, VALIDATE, Stage
from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    from .parts import TrainerParts


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


class RunSetup:
    """The Trainer's set-up steps (one instance per Trainer)."""

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        self.last_model: Any = None  # the model prepared last (fit or evaluation): a new module frees it first
        self._routed: tuple[Any, Any] | None = None
        # stage name -> the loaders its latest run was given (before preparation): Lightning's
        # trainer.val_dataloaders / test_dataloaders / predict_dataloaders
        self.stage_loaders: dict[str, list[Any]] = {}

    # -- checks -----------------------------------------------------------------------------------------------------
    def check_module(self, module: Any, fit: bool) -> TrainingModule:
        """``module`` checked (a compiled module: the module itself, its forward compiled); returns it."""
        if module is None and fit:
            raise TypeError("Trainer.fit() needs the TrainingModule to train: Trainer.fit(module, ...).")
        module = from_compiled(module)
        if not isinstance(module, TrainingModule):
            raise TypeError(f"Trainer expects a stoker.TrainingModule, got {type(module).__name__}. Subclass "
                            "TrainingModule and define training_step and configure_optimizers.")
        if fit:
            for name, what in (("training_step", "return the loss of a batch"),
                               ("configure_optimizers", "return an optimizer")):
                if not defines_hook(module, name, TrainingModule):
                    raise TypeError(f"{type(module).__name__} does not define {name}(); Trainer.fit needs it to "
                                    f"{what}.")
        return module

    def eval_module(self, module: Any, fn: str) -> TrainingModule:
        module = from_compiled(module) if module is not None else self.trainer.module
        if module is None:
            raise ValueError(f"Trainer.{fn}() needs a module: pass it, or call fit first.")
        module = self.check_module(module, fit=False)
        stage = STAGES[fn]
        if stage.step_required and not defines_hook(module, stage.step, TrainingModule):
            raise TypeError(f"Trainer.{fn}() needs {type(module).__name__}.{stage.step}(batch, batch_idx).")
        return module

    def loaders(self, value: Any, module: Any, hook: str, required: bool = False) -> list[Any]:
        """The loaders passed, else those of the data module's ``hook`` (when it defines it), else the module's: a
        list, a dict (in order) or a ``CombinedLoader`` (its iterables, one after the other) gives several."""
        value = self.requested(value, module, hook, required)
        if value is None:
            return []
        if isinstance(value, CombinedLoader):
            value = value.flattened
        if isinstance(value, Mapping):  # several named loaders (a data module may return a dict): in their order
            value = list(value.values())
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for i, item in enumerate(items):
            check_iterable(item, f"Loader #{i}")
        return items

    def requested(self, value: Any, module: Any, hook: str, required: bool = False) -> Any:
        """``value``, else what the data module's ``hook`` (when it defines it) or the module's returns, as it is."""
        datamodule = self.trainer.datamodule
        if value is None and datamodule is not None and defines(datamodule, hook):
            value = getattr(datamodule, hook)()
        elif value is None and callable(getattr(module, hook, None)):
            if isinstance(module, TrainingModule):  # the hook may read self.trainer (Lightning attaches it first)
                module.trainer = self.trainer
            value = getattr(module, hook)()
        if value is None:
            if required:
                where = f"{type(datamodule).__name__}.{hook}() or " if datamodule is not None else ""
                raise ValueError(f"No dataloaders: pass dataloaders=... or define {where}"
                                 f"{type(module).__name__}.{hook}().")
        return value

    def loader_or_hook(self, value: Any, module: Any, hook: str, argument: str) -> Any:
        """The train loader; several (a list or dict) are read together, each batch holding one of each
        (``CombinedLoader(..., "max_size_cycle")``, as Lightning does)."""
        value = self.requested(value, module, hook)
        if value is None:
            raise ValueError(f"Trainer.fit needs exactly one train loader ({argument}=DataLoader(...) or "
                             f"{type(module).__name__}.{hook}()), or a list or dict of them; got none.")
        if isinstance(value, (Mapping, list, tuple)):
            for i, item in enumerate(CombinedLoader(value).flattened):
                check_iterable(item, f"Loader #{i}")
            value = CombinedLoader(value, "max_size_cycle")
        if isinstance(value, CombinedLoader) and value.mode == "sequential":
            raise ValueError("Trainer.fit got a CombinedLoader(mode='sequential'): training reads its loaders "
                             "together, one batch of each per step. Use mode='max_size_cycle', 'max_size' or "
                             "'min_size' (sequential is for validation and test loaders).")
        check_iterable(value, "The train loader")
        return value

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
        """``reload_dataloaders_every_n_epochs``: at the start of every n-th epoch, the train and val loaders are
        asked for again from the data module / module hooks (loaders passed to ``fit`` are kept as they are)."""
        t = self.trainer
        n = t.options.reload_dataloaders_every_n_epochs
        if not n or epoch == 0 or epoch % n:
            return
        module, acc = t.module, t.accelerator
        if run.train_from_hooks:
            new = self.loader_or_hook(None, module, TRAIN.loader_hook, "train_dataloaders")
            run.train_loader = replace_loader(acc, run.train_loader, new)
            self._limit_train(run.train_loader)
            run.val_check_batch = self._val_check_batch()
        if run.val_from_hooks and run.val_loaders:
            run.val_loaders = [replace_loader(acc, old, new) for old, new in
                               zip(run.val_loaders, self.loaders(None, module, VALIDATE.loader_hook))]
            self._count(VALIDATE, run.val_loaders)

    # -- fit --------------------------------------------------------------------------------------------------------
    def prepare_fit(self, module: TrainingModule, train: DataLoader, vals: list[DataLoader],
                    passed: tuple[bool, bool] = (False, False)) -> FitRun:
        """Prepares everything ``fit`` needs, in order, and returns it as the run the loops get. ``passed``:
        whether the train / val loaders were ``fit``'s arguments (else they came from hooks)."""
        t = self.trainer
        acc = t.accelerator
        automatic = bool(getattr(module, "automatic_optimization", True))
        if not automatic:
            check_manual(t, module)
        t.apply_seed()  # before prepare: the loaders' shuffle seeds are drawn from the global RNG there
        acc.free_memory(reset_step=False)  # a second fit continues its step count
        # autocast_forward=False: the loops enter the precision's autocast around each step themselves (one mechanism)
        model = self.last_model = acc.prepare_model(module, autocast_forward=False)
        training_step = self._route(module, model, automatic)
        has_validation_step = defines_hook(module, VALIDATE.step, TrainingModule)
        if vals and not has_validation_step:
            warnings.warn(f"val_dataloaders were given but {type(module).__name__} has no validation_step; "
                          "validation is skipped.", stacklevel=user_stacklevel())
            vals = []  # not prepared or counted: num_val_batches == [] (Lightning's)
        if t.options.in_order_fit_loaders:
            train, vals = in_order(train, "train"), [in_order(v, "val") for v in vals]
        self.stage_loaders.update({TRAIN.name: [train], VALIDATE.name: list(vals)})
        loader = prepare_loader(acc, train)
        val_loaders = [prepare_loader(acc, v) for v in vals]
        self._limit_train(loader)
        self._count(VALIDATE, val_loaders)
        val_check_batch = self._val_check_batch()
        optimizers, configs = parse_optimizers(module.configure_optimizers(), manual=not automatic)
        if len(optimizers) > 1 and automatic:
            raise ValueError(
                f"{type(module).__name__}.configure_optimizers() returned {len(optimizers)} optimizers ("
                + ", ".join(type(o).__name__ for o in optimizers) + "), but automatic optimization steps every "
                "optimizer on the same loss. To step several optimizers (e.g. a GAN's generator and "
                "discriminator), set `automatic_optimization = False` on the module and step them yourself in "
                "training_step (manual optimization, as in Lightning 2); for one loss, return one optimizer, with "
                "several parameter groups if they need different settings."
            )
        t.optimizers = [acc.prepare_optimizer(o) for o in optimizers]
        for config in configs:  # a scheduler of another kind (manual optimization) is the module's own business
            if config.is_torch_scheduler:
                config.scheduler = acc.prepare_scheduler(config.scheduler)
        t.lr_scheduler_configs = configs
        return FitRun(
            model=model, train_loader=loader, val_loaders=val_loaders,
            val_enabled=has_validation_step and any(t.num_val_batches),  # limit_val_batches=0 turns it off
            val_check_batch=val_check_batch, training_step=training_step, automatic=automatic,
            parameters=[p for p in module.parameters() if p.requires_grad],
            step_schedulers=[c for c in configs if c.interval == "step"],
            manual_optimizers=wrap_optimizers(t, model), train_from_hooks=not passed[0],
            val_from_hooks=not passed[1])

    def _limit_train(self, loader: Any) -> None:
        t = self.trainer
        n = self._limit(loader, t.limit_train_batches, TRAIN.limit)
        if n == 0:
            reason = "limit_train_batches=%r leaves none" % t.limit_train_batches if t.limit_train_batches is not None \
                else "it is empty"
            raise ValueError(f"The train loader has no batches ({reason}); Trainer.fit needs at least one. Check the "
                             "dataset size, batch_size and drop_last.")
        t.num_training_batches = n
        if t.loggers and n < t.log_every_n_steps:
            warnings.warn(f"The number of training batches ({n}) is smaller than the logging "
                          f"interval Trainer(log_every_n_steps={t.log_every_n_steps}): no step values reach the "
                          "loggers in some epochs. Set a lower log_every_n_steps to log every epoch.",
                          UserWarning, stacklevel=user_stacklevel())
        if math.isinf(n) and t.max_epochs is None and t.max_steps is None:
            raise ValueError("The train loader has no length (an iterable dataset) and neither max_epochs nor "
                             "max_steps is set, so the Trainer cannot tell when to stop. Pass Trainer(max_steps=N) "
                             "or Trainer(max_epochs=N).")

    def _count(self, stage: Stage, loaders: list[Any]) -> None:
        """Applies ``stage``'s batch limit to its prepared ``loaders``; their batch counts go to its count attribute
        (``num_val_batches``...)."""
        t = self.trainer
        limit = getattr(t, stage.limit)
        setattr(t, stage.count, [self._limit(loader, limit, stage.limit) for loader in loaders])

    def _limit(self, loader: Any, limit: Any, name: str) -> int | float:
        """Applies a ``limit_*_batches`` to a prepared loader; returns its batches per epoch (inf: unknown)."""
        n = check.resolve_limit(name, limit, _length(loader))
        loader.limit_batches(n)
        length = _length(loader)
        if length is not None:
            return length
        return float("inf") if n is None else n

    def _val_check_batch(self) -> int | None:
        t = self.trainer
        interval, n = t.val_check_interval, t.num_training_batches
        if t.val_check_seconds is not None:
            return None  # validation by time (the fit loop's clock), not by batch count
        if isinstance(interval, int):
            if t.check_val_every_n_epoch is not None and not math.isinf(n) and interval > n:
                raise ValueError(f"Trainer(val_check_interval={interval}) is more than the {n} training batches of "
                                 "an epoch, so validation would never run. Use a smaller int, a fraction such as "
                                 "1.0, or check_val_every_n_epoch=None to count batches across epochs.")
            return interval
        if math.isinf(n):
            if interval != 1.0:
                raise ValueError(f"Trainer(val_check_interval={interval}) is a fraction of an epoch, but the train "
                                 "loader has no length. Use an int number of batches, or 1.0.")
            return None
        return max(1, int(n * interval))

    def continue_position(self, loader: Any) -> None:
        """A second ``fit`` on the same Trainer continues where the first stopped (same epoch and batch):
        ``loader`` (the new fit's train loader) is moved there."""
        loop = self.trainer.fit_loop
        if loop.phase == "batches" and loop.batches_done and not loop.epoch_batches_finished:
            state = loader.state_dict()
            if "loader" not in state:  # map-style: the position is (epoch, batches); iterable ones restart
                loader.load_state_dict({**state, "epoch": loop.epoch, "batches_yielded": loop.batches_done})
                return
            loop.epoch, loop.batches_done = loop.epoch + 1, 0

    def estimated_steps(self) -> int | float:
        t = self.trainer
        n = t.num_training_batches
        per_epoch = math.inf if math.isinf(n) else math.ceil(n / t.accumulate)
        epochs = t.max_epochs_effective
        total = per_epoch * epochs if epochs is not None else math.inf
        if t.max_steps is not None:
            total = min(total, t.max_steps)
        return int(total) if not math.isinf(total) else total

    # -- evaluation -------------------------------------------------------------------------------------------------
    def prepare_eval(self, module: TrainingModule, loaders: list[DataLoader], stage: Stage) -> EvalRun:
        """Prepares ``module`` and ``loaders`` for ``stage`` (validate, test or predict) with its batch limit."""
        t = self.trainer
        acc = t.accelerator
        if self.last_model is None or acc.unwrap_model(self.last_model) is not module:
            acc.free_memory(reset_step=False)  # a second fit continues its step count
        # The model fit prepared comes back as it was; the evaluation loops enter the autocast around each step.
        model = self.last_model = acc.prepare_model(module, evaluation_mode=True, autocast_forward=False)
        self.stage_loaders[stage.name] = list(loaders)
        prepared = [prepare_loader(acc, loader) for loader in loaders]
        self._count(stage, prepared)
        return EvalRun(model=model, loaders=prepared)

    # -- several processes ------------------------------------------------------------------------------------------
    def _route(self, module: TrainingModule, model: Any, automatic: bool) -> Callable[[Any, int], Any]:
        """The call that runs ``training_step``. Under DDP it must run inside the wrapper's forward (which arms
        gradient sync): the module's forward learns to dispatch ``model(batch, idx, _stoker_step=...)`` to it."""
        if model is module or not automatic:  # manual optimization syncs gradients itself (manual.py)
            return module.training_step
        inner = module.__dict__.get("forward")

        def forward(*args: Any, _stoker_step: str | None = None, **kwargs: Any) -> Any:
            if _stoker_step is not None:
                return getattr(module, _stoker_step)(*args, **kwargs)
            return (inner or type(module).forward.__get__(module))(*args, **kwargs)

        module.forward = forward
        self._routed = (module, inner)
        return lambda batch, batch_idx: model(batch, batch_idx, _stoker_step="training_step")

    def teardown(self, module: Any = None) -> None:
        """Gives ``module`` back as it came: without the training-step route and without the autocast wrapper
        that preparing put on its forward, so the precision of this run does not leak into the next one."""
        if self._routed is not None:
            routed, inner = self._routed
            self._routed = None
            if inner is None:
                routed.__dict__.pop("forward", None)
            else:
                routed.forward = inner
        if module is not None:
            self.trainer.accelerator.unwrap_model(module, keep_fp32_wrapper=False)


def in_order(loader: Any, kind: str) -> Any:
    """``loader`` reading its dataset in order (``RunOptions.in_order_fit_loaders``): a loader with another sampler
    is rebuilt with a ``SequentialSampler``, with a warning; a custom batch sampler or an iterable dataset is kept."""
    sampler = getattr(loader, "sampler", None)
    if not isinstance(loader, DataLoader) or sampler is None or isinstance(sampler, SequentialSampler) or \
            isinstance(loader.dataset, IterableDataset) or type(loader.batch_sampler) not in (BatchSampler, type(None)):
        return loader
    warnings.warn(f"The {kind} loader shuffles (or samples) but this fit reads its loaders in order (overfit_batches):"
                  f" its {type(sampler).__name__} is replaced by a SequentialSampler.", UserWarning, stacklevel=5)
    keep = ("batch_size", "num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
            "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers")
    options = {name: getattr(loader, name) for name in keep}
    if not options["num_workers"]:  # these are only accepted with worker processes
        options.pop("prefetch_factor"), options.pop("persistent_workers")
    return DataLoader(loader.dataset, sampler=SequentialSampler(loader.dataset), **options)


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
