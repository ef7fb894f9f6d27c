"""Hook names and the one dispatcher through which the Trainer calls them.

Owns: the order of calls (Lightning's: the callbacks in list order, then the module; ``on_load_checkpoint`` the
module first; at ``on_train_epoch_end`` checkpointing and early stopping after the module) and the check that a
callback's ``on_*`` methods are all real hooks. Does not own: when hooks fire (``loops.py``), or the hook names and
signatures (``stoker/callbacks/base.py`` writes each hook once, as a ``Callback`` method; ``HOOKS`` is read off it).

The hook contract, as the fit loop runs it (Composer's event list style; the module's own step hooks, in
``step_hooks.py``, in brackets)::

    setup(stage="fit")
    on_fit_start
    on_train_start
    for epoch:
        on_train_epoch_start
        for batch:
            [on_before_batch_transfer -> transfer_batch_to_device -> on_after_batch_transfer]
            on_train_batch_start(batch, batch_idx)
            training_step
            if the window opens: on_before_zero_grad(opt) -> [optimizer_zero_grad]
            on_before_backward(loss) -> [backward] -> on_after_backward()
            if the window closes: on_before_optimizer_step(opt) -> [configure_gradient_clipping]
                                  -> [optimizer_step] -> [lr_scheduler_step] (epoch schedulers: at the last batch)
            on_train_batch_end(outputs, batch, batch_idx)
            [validation when due mid-epoch]
            [a step ReduceLROnPlateau's lr_scheduler_step] (the last batch's: after the epoch's validation)
        [validation when due at the epoch's end]
        on_train_epoch_end (other callbacks, the module, then checkpointing / early stopping)
        [an epoch ReduceLROnPlateau's lr_scheduler_step]
    on_train_end
    on_fit_end
    teardown(stage="fit")

    validation: on_validation_start, on_validation_epoch_start,
                (on_validation_batch_start, validation_step, on_validation_batch_end)*,
                on_validation_epoch_end, on_validation_end — likewise for test and predict.
"""

from __future__ import annotations

import difflib
import functools
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

# HOOKS: every hook name, in order, read off ``Callback``'s methods (``stoker/callbacks/base.py``), the one place
# they are written; re-exported here for the Trainer. ``TrainingModule`` defines the same hooks without
# ``(trainer, module)``; tests/trainer/test_module_surface.py checks that the three agree.
from ..callbacks.base import HOOKS, Callback
from .mode_hooks import MODE_HOOKS
from .overrides import defines_hook
from .step_hooks import STEP_HOOKS_ON, TRANSFER_HOOKS, BatchTransfer, StepHooks
from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    import torch

    from ..accelerator import Accelerator
    from .profilers import Profiler

__all__ = ["HOOKS", "HookDispatcher", "batch_mover", "check_callbacks", "clear_gradients", "defines_hook",
           "merge_module_callbacks", "overrides"]
_HOOK_SET = frozenset(HOOKS)


def check_callbacks(callbacks: Iterable[Any]) -> list[Any]:
    """Validates ``Trainer(callbacks=...)``: Callback instances whose ``on_*`` methods are all hooks.

    Raises:
        TypeError: An entry is not a :class:`~stoker.Callback` instance.
        ValueError: A callback defines an ``on_*`` method that is not a hook (with a did-you-mean).
    """
    result = list(callbacks)
    for i, callback in enumerate(result):
        if not isinstance(callback, Callback):
            kind = "a class" if isinstance(callback, type) else f"a {type(callback).__name__}"
            raise TypeError(
                f"Trainer(callbacks=[...]) entry #{i} is {kind} ({callback!r}), not a Callback instance. "
                "Subclass stoker.Callback and pass an instance, e.g. callbacks=[MyCallback()]."
            )
        for klass in type(callback).__mro__:
            if klass is Callback or klass is object:
                continue
            for name, value in vars(klass).items():
                if name.startswith("on_") and callable(value) and name not in _HOOK_SET:
                    raise ValueError(_not_a_hook(type(callback).__name__, name))
    return result


def _not_a_hook(owner: str, name: str) -> str:
    if name in MODE_HOOKS or name in STEP_HOOKS_ON:  # Lightning's module-only hooks: a callback does not get them
        return (f"{owner}.{name} is a hook of the TrainingModule only, so a callback's would never be called. "
                "Define it on your TrainingModule, or use a Trainer hook here (on_validation_start, "
                "on_train_batch_start...).")
    close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (f"{owner}.{name} is not a Trainer hook, so it would never be called.{hint} Rename it, or make it "
            f"private (a leading underscore). Hooks: {', '.join(h for h in HOOKS if h.startswith('on_'))}.")


# Hooks whose module implementation runs before the callbacks' (Lightning's order): a checkpoint's contents reach
# the module first when loading. Every other hook calls the callbacks first, then the module.
_MODULE_FIRST = frozenset({"on_load_checkpoint"})
# The dispatched hooks in which ``self.log`` has nothing to record into (Lightning's table refuses logging there too):
# the run's set-up and end, the stage ends after their epoch values went out, checkpoint I/O, and all of predict.
NO_LOGGING = frozenset({
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end", "on_train_end",
    "on_validation_end", "on_test_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start",
    "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end", "on_exception", "on_save_checkpoint",
    "on_load_checkpoint"})
# The hook at which the monitoring callbacks (checkpointing, early stopping) go last, after the module: what the
# module logs in its on_train_epoch_end is what they compare on that same epoch end.
MONITORED_HOOK = "on_train_epoch_end"


def is_monitoring(callback: Callback) -> bool:
    """Whether ``callback`` decides on logged values at an epoch's end (a ModelCheckpoint, an EarlyStopping, or a
    subclass): such callbacks run after the module's ``on_train_epoch_end`` (see :data:`MONITORED_HOOK`)."""
    from ..callbacks.checkpoint import ModelCheckpoint
    from ..callbacks.early_stopping import EarlyStopping
    from ..callbacks.on_exception import OnExceptionCheckpoint

    return isinstance(callback, (ModelCheckpoint, EarlyStopping, OnExceptionCheckpoint))


class HookDispatcher:
    """Calls a hook on each callback in list order, then on the module (Lightning's order), skipping objects that
    keep the no-op default. Two exceptions: ``on_load_checkpoint`` calls the module first, and at
    ``on_train_epoch_end`` the monitoring callbacks (:func:`is_monitoring`) come after the module.

    The table is built once per run, so the loop pays one dict lookup and a loop over the real implementations
    (usually none) per hook.

    Example:
        >>> hooks = HookDispatcher(trainer, module, callbacks)
        >>> hooks.call("on_train_batch_start", batch, 0)  # the callbacks, then module.on_train_batch_start(batch, 0)
    """

    def __init__(self, trainer: object, module: object, callbacks: Iterable[Callback]) -> None:
        """``trainer`` and ``module`` are handed to the callbacks' hooks as they are."""
        from .module import TrainingModule

        self._table: dict[str, tuple[Callable[..., Any], ...]] = {}
        callbacks = list(callbacks)
        for callback in callbacks:  # a callback's self.log logs through the module of this run
            callback.run_module = module
        # How many implementations at the end of MONITORED_HOOK's entry belong to monitoring callbacks.
        self._monitors = 0
        for name in HOOKS:
            own = (getattr(module, name),) if module is not None and defines_hook(module, name, TrainingModule) \
                else ()
            fns = [functools.partial(getattr(c, name), trainer, module) for c in callbacks
                   if defines_hook(c, name, Callback)]
            if name in _MODULE_FIRST:
                self._table[name] = (*own, *fns)
            elif name == MONITORED_HOOK:
                bound = [c for c in callbacks if defines_hook(c, name, Callback)]
                late = [fn for fn, c in zip(fns, bound) if is_monitoring(c)]
                self._monitors = len(late)
                self._table[name] = (*[fn for fn, c in zip(fns, bound) if not is_monitoring(c)], *own, *late)
            else:
                self._table[name] = (*fns, *own)
        profiler = getattr(trainer, "profiler", None)
        if profiler is not None and profiler.records:  # PassThroughProfiler: nothing wrapped
            self._profile(profiler, module, callbacks)
        #: The NO_LOGGING hook running now (None: logging is allowed), read by ``self.log`` (trainer/logging.py).
        self.refusing: str | None = None
        for name in NO_LOGGING & self._table.keys():  # only these are wrapped: the batch hooks stay as they are
            self._table[name] = tuple(self._refusing_logs(name, fn) for fn in self._table[name])

    def _refusing_logs(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with :attr:`refusing` set to ``name`` while it runs."""
        def call(*args: Any, **kwargs: Any) -> Any:
            outer, self.refusing = self.refusing, name
            try:
                return fn(*args, **kwargs)
            finally:
                self.refusing = outer

        return call

    def _profile(self, profiler: Profiler, module: object, callbacks: list[Callback]) -> None:
        """Every implementation timed under its owner's name, and the stages marked by the hooks that open and
        close them (a table built with a profiler only: a run without one pays nothing)."""
        from .profilers import STAGES

        owners = {id(module): f"[Module]{type(module).__name__}"} | \
            {id(c): f"[Callback]{c.state_key}" for c in callbacks}  # two of a class apart: EarlyStopping{'monitor': ..}
        for name, fns in self._table.items():  # a module's bound hook, or a partial of a callback's
            self._table[name] = tuple(
                profiler.wrap(f"{owners[id(getattr(getattr(fn, 'func', fn), '__self__', None))]}.{name}", fn)
                for fn in fns)
        for stage, (opens, closes) in STAGES.items():
            action = f"[Stage]{stage}"
            self._table[opens] = (functools.partial(profiler.begin, action), *self._table[opens])
            self._table[closes] = (*self._table[closes], functools.partial(profiler.end, action))
            if closes == MONITORED_HOOK:
                self._monitors += 1  # the stage's end goes with the last part

    def get(self, name: str) -> tuple[Callable[..., Any], ...]:
        """The implementations of hook ``name`` in call order (callbacks already bound to trainer and module)."""
        return self._table[name]

    def split_monitored(self) -> tuple[tuple[Callable[..., Any], ...], tuple[Callable[..., Any], ...]]:
        """:data:`MONITORED_HOOK`'s implementations in two parts: the other callbacks' and the module's, then the
        monitoring callbacks' (the loop publishes what the first part logged before it calls the second)."""
        fns = self._table[MONITORED_HOOK]
        cut = len(fns) - self._monitors
        return fns[:cut], fns[cut:]

    def has(self, name: str) -> bool:
        """Whether any object implements hook ``name``."""
        return bool(self._table[name])

    def call(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Calls hook ``name`` with ``args`` and ``kwargs`` (callbacks also get ``trainer, module`` first)."""
        for fn in self._table[name]:
            fn(*args, **kwargs)


def checkpoints_last(callbacks: list[Any]) -> list[Any]:
    """``callbacks`` with the checkpoint callbacks moved to the end, each group in its own order (Lightning's rule):
    a checkpoint saves what the other callbacks did at the same hook."""
    from ..callbacks.base import Checkpoint

    return [c for c in callbacks if not isinstance(c, Checkpoint)] + [c for c in callbacks if isinstance(c, Checkpoint)]


def merge_module_callbacks(callbacks: list[Any], module: Any) -> list[Any]:
    """The Trainer's callbacks with ``module.configure_callbacks()`` merged in (Lightning's rule).

    A module callback replaces every Trainer callback of its class or a parent class (a module's
    ``ModelCheckpoint`` replaces the default one); the others are appended. Checkpoint callbacks go last
    (`checkpoints_last`).
    """
    extra = module.configure_callbacks() if module is not None else None
    if not extra:
        return callbacks
    extra = check_callbacks([extra] if isinstance(extra, Callback) else extra)
    kinds = {type(c) for c in extra}
    replaced = {type(c) for c in callbacks if type(c) is not Callback and any(issubclass(k, type(c)) for k in kinds)}
    merged = checkpoints_last([c for c in callbacks if type(c) not in replaced] + extra)
    keys = [c.state_key for c in merged]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{type(module).__name__}.configure_callbacks() adds callbacks whose state_key {duplicates} "
                         "is already used by the Trainer's callbacks; give each a distinct state_key.")
    return merged


def overrides(module: object, name: str) -> bool:
    """Whether ``module`` replaces the default of step hook ``name`` (on its class, or set on the instance)."""
    return defines_hook(module, name, StepHooks)


def _transfer_owner(module: object, datamodule: object | None, name: str) -> object | None:
    """Whose transfer hook ``name`` runs: the data module's when it defines it (Lightning's rule, with a warning
    when the module defines it too), else the module's when it overrides it, else nobody's (None)."""
    if datamodule is not None and defines_hook(datamodule, name, BatchTransfer, unwrap=True):
        if overrides(module, name):
            warnings.warn(f"{type(module).__name__} and {type(datamodule).__name__} both define {name}: the data "
                          "module's runs, as in Lightning. Keep one of them.", UserWarning,
                          stacklevel=user_stacklevel())
        return datamodule
    return module if overrides(module, name) else None


def batch_mover(module: object, loader: Any, accelerator: Accelerator,
                datamodule: object | None = None) -> Callable[[Any, int], Any] | None:
    """The three transfer hooks as one call ``move(batch, dataloader_idx)``, or None when neither ``module`` nor
    ``datamodule`` defines any of them and the precision keeps batches as they are: the loader then places each
    batch itself and nothing runs per batch. When a hook is defined the loader stops placing batches (its public
    ``device`` is cleared) so that ``on_before_batch_transfer`` sees the batch as collated (a loader without that
    attribute, inside a CombinedLoader, keeps placing). A true precision (``bf16-true``, ``64-true``...) converts the
    batch's floating-point tensors to its dtype, before the hooks as Lightning's loops do, so that a step calling a
    layer directly (not through ``forward``) gets them in the weights' dtype."""
    owners = [_transfer_owner(module, datamodule, name) for name in TRANSFER_HOOKS]
    precision = accelerator.precision
    if all(owner is None for owner in owners):  # the loader places the batches: converted on the device, if at all
        return (lambda batch, dataloader_idx: precision.convert_input(batch)) if precision.converts_input else None
    if getattr(loader, "device", None) is not None:
        loader.device = None
    before, transfer, after = (getattr(module if owner is None else owner, name)
                               for owner, name in zip(owners, TRANSFER_HOOKS))
    device, convert = accelerator.device, precision.convert_input

    def move(batch: Any, dataloader_idx: int) -> Any:
        return after(transfer(before(convert(batch), dataloader_idx), device, dataloader_idx), dataloader_idx)
    return move


def clear_gradients(module: torch.nn.Module, accelerator: Accelerator) -> None:
    """A run starts without gradients (Lightning's ``zero_grad()`` after ``on_fit_start`` and before an evaluation),
    except those of an accumulation window a resumed fit is inside (its checkpoint restored them)."""
    if accelerator.sync_gradients:
        module.zero_grad()
