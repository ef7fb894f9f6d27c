"""When a run asks for its loaders, and what happens at that moment: the request, its checks, the preparation.

Owns the moments (Lightning's): a fit asks for its val loaders at its first validation (the sanity check's, after
``on_sanity_check_start``; else, when the first epoch validates, right after the train loader, so that their batch
counts are known from the start; else the first one in the loop) and for its train loader after the sanity check,
before ``on_train_start`` (earlier in two cases: resuming from a checkpoint, whose train-loader position is restored
with it, and reading ``estimated_stepping_batches``, which needs the loader's length); ``validate`` / ``test`` /
``predict`` ask when their stage runs, after the weights are loaded. Each is asked once per call, unless
``reload_dataloaders_every_n_epochs=n`` asks the hooks again (loaders passed as arguments are kept):

* the train loader at the start of every epoch at least n epochs after the one that last asked for it
  (epochs 0, n, 2n...);
* the val loaders at a validation at least n epochs after the one that last asked for them. A sanity check asks
  for them too, and counts as epoch 0's request only when epoch 0 validates (``check_val_every_n_epoch``);
  otherwise the first validation asks again.

With ``RunOptions.in_order_fit_loaders`` (Lightning's ``overfit_batches``) the train loader is read in dataset order
and validation reads it too (its first ``limit_val_batches``): the val loaders are not asked for.

At each request: the checks (a wrong or empty loader is an error there, naming the hook), the few-workers warning
(``workers.py``), preparation through the Accelerator, the batch limits and counts. Only the train loader is
registered for checkpointing: its position is what a resume needs, and so the checkpoint's loader count does not
depend on whether a validation had run yet. The others are prepared alike but read from their start each time, and
their seeds (shuffle, workers) are not drawn from the global RNG: preparing one in the middle of a run leaves the
random stream as it was, so a resumed run, which prepares it at another point, stays bit-identical.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from . import args as check
from .datamodule import defines
from .hooks import defines_hook
from .iterables import CombinedLoader, batch_count, check_iterable, prepare_loader, replace_loader
from .module import TrainingModule
from .stages import TRAIN, VALIDATE, Stage
from .workers import warn_about_loaders
from ..user_frame import PossibleUserWarning, user_stacklevel

if TYPE_CHECKING:
    from .parts import TrainerParts
    from .run import FitRun


class MissingLoaderError(TypeError, ValueError):
    """A stage with no loader passed and no loader hook to ask: a missing argument, so a ``TypeError`` (Lightning's
    kind), and the ``ValueError`` stoker raised for it before."""


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


class LoaderRequests:
    """Asks for a run's loaders at their moment and prepares them (see the module docstring); one per Trainer."""

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        # stage name -> the loaders its latest run was given (before preparation): Lightning's
        # trainer.val_dataloaders / test_dataloaders / predict_dataloaders
        self.stage_loaders: dict[str, list[Any]] = {}
        self.stage_shapes: dict[str, Any] = {}  # stage name -> the dict or CombinedLoader it was given, if one
        self.given: tuple[Any, Any] = (None, None)  # fit's train / val arguments (None: the hooks are asked)
        self.module: TrainingModule | None = None
        self.run: FitRun | None = None  # the fit being set up or run
        self.train_epoch = -math.inf  # the epoch that last asked for the train loader in this fit
        self.val_epoch = -math.inf  # likewise for the val loaders
        self.val_asked = False

    # -- asking -----------------------------------------------------------------------------------------------------
    def requested(self, value: Any, module: Any, hook: str, required: bool = False) -> Any:
        """``value``, else what the data module's ``hook`` (when it defines it) or the module's returns, as it is
        (a hook's answer checked at once, the error naming the hook)."""
        value, returned = self._ask(value, module, hook)
        if value is None and required:
            datamodule = self.trainer.datamodule
            where = f"{type(datamodule).__name__}.{hook}() or " if datamodule is not None else ""
            said = returned or passed_to(self.trainer.state.fn, "dataloaders")
            raise MissingLoaderError(f"{said}. Found None. No dataloaders: pass dataloaders=... or define {where}"
                                     f"{type(module).__name__}.{hook}().")
        return value

    def _ask(self, value: Any, module: Any, hook: str) -> tuple[Any, str]:
        """``value``, else the hook's answer; and, when a hook answered, Lightning's first words for a bad answer."""
        datamodule = self.trainer.datamodule
        source = datamodule if value is None and datamodule is not None and defines(datamodule, hook) else \
            module if value is None and defines_hook(module, hook, TrainingModule) else None
        if source is None:
            return value, ""
        if isinstance(source, TrainingModule):  # the hook may read self.trainer (Lightning attaches it first)
            source.trainer = self.trainer
        value = getattr(source, hook)()
        returned = f"An invalid dataloader was returned from `{type(source).__name__}.{hook}()`"
        flat_loaders(value, returned)
        return value, returned

    def has_source(self, value: Any, module: Any, hook: str) -> bool:
        """Whether asking for ``hook``'s loaders can give any: passed, or a data module / module hook to call."""
        datamodule = self.trainer.datamodule
        return value is not None or (datamodule is not None and defines(datamodule, hook)) or \
            defines_hook(module, hook, TrainingModule)

    def train_value(self, value: Any, module: Any, argument: str = "train_dataloaders") -> Any:
        """The train loader; several (a list or dict) are read together, each batch holding one of each
        (``CombinedLoader(..., "max_size_cycle")``, as Lightning does)."""
        value, returned = self._ask(value, module, TRAIN.loader_hook)
        if value is None:
            raise MissingLoaderError(f"{returned or passed_to('fit', argument)}. Found None. Trainer.fit needs exactly "
                                     f"one train loader ({argument}=DataLoader(...) or {type(module).__name__}."
                                     f"{TRAIN.loader_hook}()), or a list or dict of them; got none.")
        return check_train_value(value, returned or passed_to("fit", argument))

    # -- fit ----------------------------------------------------------------------------------------------------------
    def begin_fit(self, module: TrainingModule, train: Any, vals: Any) -> None:
        """A new fit: loaders passed are checked now (hooks are asked later); a fit with no train loader at all is an
        error, val loaders without a ``validation_step`` (or the reverse) a warning, at once."""
        self.given, self.module, self.run = (train, vals), module, None
        self.train_epoch = self.val_epoch = -math.inf
        self.val_asked = False
        if train is not None:
            check_train_value(train, passed_to("fit", "train_dataloaders"))
        elif not self.has_source(None, module, TRAIN.loader_hook):
            self.train_value(None, module)  # raises: it says how to give one
        flat_loaders(vals, passed_to("fit", "val_dataloaders"))
        steps, loaders = defines_hook(module, VALIDATE.step, TrainingModule), self.has_source(vals, module,
                                                                                              VALIDATE.loader_hook)
        name = type(module).__name__  # (Lightning's sentences first, for a warnings filter written for them)
        if loaders and not steps:
            warnings.warn(f"You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop. ({name} "
                          "has no validation_step, so the val loaders are not read.)", stacklevel=user_stacklevel())
        elif steps and not loaders and not self.trainer.options.in_order_fit_loaders:
            warnings.warn(f"You defined a `validation_step` but have no `val_dataloader`. Skipping val loop. (Pass "
                          f"val_dataloaders to fit, or define {name}.val_dataloader, to validate.)",
                          PossibleUserWarning, stacklevel=user_stacklevel())

    def validates(self, module: TrainingModule) -> bool:
        """Whether this fit may validate: a ``validation_step``, val loaders to ask for, a val batch limit > 0. Until
        they are asked for, ``num_val_batches`` is ``[inf]`` (not known yet) in such a fit, ``[]`` in another."""
        t = self.trainer
        validates = defines_hook(module, VALIDATE.step, TrainingModule) and t.limit_val_batches != 0 and \
            (t.options.in_order_fit_loaders or self.has_source(self.given[1], module, VALIDATE.loader_hook))
        t.num_val_batches = [math.inf] if validates else []
        t.stage_record.loader_batches[VALIDATE.name] = list(t.num_val_batches)
        return validates

    def train(self, run: FitRun) -> Any:
        """The fit's prepared train loader: asked for now unless it was (or a reload is due: module docstring)."""
        t = self.trainer
        n, epoch = t.options.reload_dataloaders_every_n_epochs, t.current_epoch
        if run.train_loader is not None and not (n and run.train_from_hooks and epoch - self.train_epoch >= n):
            return run.train_loader
        first = run.train_loader is None
        self.train_epoch = epoch
        value = self.train_value(self.given[0], self.module)
        if t.options.in_order_fit_loaders:
            value = in_order(value, "train")
        warn_about_loaders(t, value, TRAIN)
        self.stage_loaders[TRAIN.name] = [value]
        acc = t.accelerator
        run.train_loader = prepare_loader(acc, value) if first else replace_loader(acc, run.train_loader, value)
        self.limit_train(run.train_loader)
        run.val_check_batch = self.val_check_batch(run.val_enabled)
        return run.train_loader

    def val(self, run: FitRun) -> list[Any]:
        """The fit's prepared val loaders, asked for at a validation (module docstring); empty: none, and the fit
        validates no more."""
        t = self.trainer
        n, epoch = t.options.reload_dataloaders_every_n_epochs, t.current_epoch
        if self.val_asked and not (n and run.val_from_hooks and epoch - self.val_epoch >= n):
            return run.val_loaders
        if not t.sanity_checking or validates_in(t, epoch):
            self.val_epoch = epoch
        self.val_asked = True
        if t.options.in_order_fit_loaders:  # overfitting: validation reads the train loader's first batches
            self.train(run)
            train = self.stage_loaders[TRAIN.name][0]  # several train loaders: validated one after the other
            vals = flat_loaders(train.flattened if isinstance(train, CombinedLoader) else train)
        else:
            vals = self.requested(self.given[1], self.module, VALIDATE.loader_hook)
        run.val_loaders = self.prepare(VALIDATE, vals)
        run.val_batches = list(t.num_val_batches)
        run.val_enabled = bool(run.val_loaders) and any(t.stage_record.loader_batches[VALIDATE.name])
        return run.val_loaders if run.val_enabled else []

    def prepare(self, stage: Stage, given: Any) -> list[Any]:
        """``stage``'s loaders as ``given`` (one, a list, a dict in order or a sequential ``CombinedLoader``: its
        iterables one after the other; a ``CombinedLoader`` of another mode is one loader of combined batches),
        prepared (not registered for checkpointing: read from their start each time), limited and counted: the
        batches each loader reads (``trainer.stage_record.loader_batches``) and, as Lightning counts them, each
        iterable's (``num_val_batches`` & co.: a non-sequential ``CombinedLoader``'s iterables one by one)."""
        t = self.trainer
        fn = t.state.fn or "fit"
        loaders = flat_loaders(given, passed_to(fn, "val_dataloaders" if fn == "fit" else "dataloaders"))
        self.stage_loaders[stage.name] = list(loaders)
        # given as a dict or a CombinedLoader: trainer.val_dataloaders & co. give that back (Lightning's rule)
        self.stage_shapes[stage.name] = given if isinstance(given, (Mapping, CombinedLoader)) else None
        # new loaders: their per-step values start their step axes at 0 again (Lightning's rule)
        t.eval_log_steps = {key: n for key, n in t.eval_log_steps.items() if key[0] != stage.name}
        for loader in loaders:
            warn_about_loaders(t, loader, stage)
        # prediction runs no collective per batch, so its shares need not be padded to as many batches each (a
        # padded batch would be predicted twice); evaluation's must be, for the values logged with sync_dist
        even = stage.name != "predict"
        prepared = [prepare_loader(t.accelerator, loader, checkpointed=False, even_batches=even) for loader in loaders]
        limit = getattr(t, stage.limit)
        t.stage_record.loader_batches[stage.name] = [self.limit(loader, limit, stage.limit) for loader in prepared]
        setattr(t, stage.count, [n for loader in prepared for n in _iterable_counts(loader)])
        return prepared

    # -- limits -------------------------------------------------------------------------------------------------------
    def limit_train(self, loader: Any) -> None:
        t = self.trainer
        n = t.num_training_batches = self.limit(loader, t.limit_train_batches, TRAIN.limit)
        if check.training_off(t.limit_train_batches):  # the fit loop is done at once
            return
        if n == 0:
            reason = "limit_train_batches=%r leaves none" % t.limit_train_batches if t.limit_train_batches is not None \
                else "it is empty"
            raise ValueError(f"The train loader has no batches ({reason}); Trainer.fit needs at least one. Check the "
                             "dataset size, batch_size and drop_last.")
        if t.loggers and n < t.log_every_n_steps:
            warnings.warn(f"The number of training batches ({n}) is smaller than the logging "
                          f"interval Trainer(log_every_n_steps={t.log_every_n_steps}): no step values reach the "
                          "loggers in some epochs. Set a lower log_every_n_steps to log every epoch.",
                          PossibleUserWarning, stacklevel=user_stacklevel())
        if math.isinf(n) and t.limits.max_epochs is None and t.limits.max_steps is None:
            raise ValueError("The train loader has no length (an iterable dataset) and neither max_epochs nor "
                             "max_steps is set, so the Trainer cannot tell when to stop. Pass Trainer(max_steps=N) "
                             "or Trainer(max_epochs=N).")

    @staticmethod
    def limit(loader: Any, limit: Any, name: str) -> int | float:
        """Applies a ``limit_*_batches`` to a prepared loader; returns its batches per epoch (inf: unknown). In a
        ``CombinedLoader`` the limit applies to each iterable on its own, and the combination ends by its mode."""
        combined = getattr(loader, "source", None)
        if isinstance(combined, CombinedLoader):
            combined.limits = [check.resolve_limit(name, limit, _length(leaf)) for leaf in combined.flattened]
            # no combined limit, which would cut each iterable's own count; 0 marks a stage with nothing to run
            loader.limit_batches(0 if _length(combined) == 0 else None)
        else:
            loader.limit_batches(check.resolve_limit(name, limit, _length(loader)))
        return batch_count(loader)

    def val_check_batch(self, validates: bool = True) -> int | None:
        """Validate every this many training batches (None: by time, or at the epoch's end). ``validates``: the fit
        validates at all; without validation (``limit_val_batches=0``) an interval past the epoch is no mistake."""
        t = self.trainer
        interval, n = t.val_check_interval, t.num_training_batches
        if t.val_check_seconds is not None:
            return None  # validation by time (the fit loop's clock), not by batch count
        if isinstance(interval, int):
            if validates and t.check_val_every_n_epoch is not None and not math.isinf(n) and interval > n:
                raise ValueError(f"`val_check_interval` ({interval}) must be less than or equal to the number of the "
                                 f"training batches ({n}): Trainer(val_check_interval={interval}) is more than the "
                                 f"{n} training batches of an epoch, so validation would never run. Use a smaller "
                                 "int, a fraction such as 1.0, or check_val_every_n_epoch=None to count batches "
                                 "across epochs.")
            return interval
        if math.isinf(n):
            if interval != 1.0:
                raise ValueError(f"Trainer(val_check_interval={interval}) is a fraction of an epoch, but the train "
                                 "loader has no length. Use an int number of batches, or 1.0.")
            return None
        return max(1, int(n * interval))


def _iterable_counts(loader: Any) -> list[int | float]:
    """A prepared loader's batches per epoch as Lightning lists them: a ``CombinedLoader``'s iterables one by one."""
    combined = getattr(loader, "source", None)
    return combined.iterable_batches() if isinstance(combined, CombinedLoader) else [batch_count(loader)]


def validates_in(trainer: TrainerParts, epoch: int) -> bool:
    """Whether ``epoch`` of a fit has validations (``check_val_every_n_epoch``)."""
    every = trainer.check_val_every_n_epoch
    return every is None or (epoch + 1) % every == 0


def passed_to(fn: str, argument: str) -> str:
    """Lightning's first words for a loader argument that is not one, kept first so that a test or script written
    for Lightning's message matches stoker's."""
    return f"An invalid dataloader was passed to `Trainer.{fn}({argument}=...)`"


def flat_loaders(value: Any, passed: str = "") -> list[Any]:
    """``value`` as a list of loaders (a list, a dict in order, a sequential ``CombinedLoader``'s iterables), each
    checked (``passed``: where it was given, for the error). A ``CombinedLoader`` of another mode is one loader: each
    batch combines one of each of its iterables."""
    what = f"{passed}: Loader #" if passed else "Loader #"
    if value is None:
        return []
    if isinstance(value, CombinedLoader) and value.mode != "sequential":
        for i, item in enumerate(value.flattened):
            check_iterable(item, f"{what}{i}")
        return [value]
    if isinstance(value, CombinedLoader):
        value = value.flattened
    if isinstance(value, Mapping):  # several named loaders (a data module may return a dict): in their order
        value = list(value.values())
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for i, item in enumerate(items):
        check_iterable(item, f"{what}{i}")
    return items


def check_train_value(value: Any, passed: str = "") -> Any:
    """A train loader checked (``passed``: where it was given, for the error); a list or dict of them combined
    (``"max_size_cycle"``)."""
    if isinstance(value, (Mapping, list, tuple)):
        for i, item in enumerate(CombinedLoader(value).flattened):
            check_iterable(item, f"{passed}: Loader #{i}" if passed else f"Loader #{i}")
        value = CombinedLoader(value, "max_size_cycle")
    if isinstance(value, CombinedLoader) and value.mode == "sequential":
        raise ValueError('`FitLoop` does not support the `CombinedLoader(mode="sequential")` mode: '
                         "Trainer.fit got a CombinedLoader(mode='sequential'): training reads its loaders "
                         "together, one batch of each per step. Use mode='max_size_cycle', 'max_size' or "
                         "'min_size' (sequential is for validation and test loaders).")
    check_iterable(value, f"{passed}: the train loader" if passed else "The train loader")
    return value


def in_order(loader: Any, kind: str) -> Any:
    """``loader`` reading its dataset in order (``RunOptions.in_order_fit_loaders``): a loader with another sampler
    is rebuilt with a ``SequentialSampler``, with a warning; a custom batch sampler or an iterable dataset is kept."""
    if isinstance(loader, CombinedLoader):  # several train loaders: each in order
        return loader.map(lambda leaf: in_order(leaf, kind))
    sampler = getattr(loader, "sampler", None)
    if not isinstance(loader, DataLoader) or sampler is None or isinstance(sampler, SequentialSampler) or \
            isinstance(loader.dataset, IterableDataset) or type(loader.batch_sampler) not in (BatchSampler, type(None)):
        return loader
    warnings.warn(f"You requested to overfit but enabled {kind} dataloader shuffling: this fit reads its loaders in "
                  f"order (overfit_batches), so its {type(sampler).__name__} is replaced by a SequentialSampler.",
                  UserWarning, stacklevel=user_stacklevel())
    keep = ("batch_size", "num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
            "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers")
    options = {name: getattr(loader, name) for name in keep}
    if not options["num_workers"]:  # these are only accepted with worker processes
        options.pop("prefetch_factor"), options.pop("persistent_workers")
    return DataLoader(loader.dataset, sampler=SequentialSampler(loader.dataset), **options)
