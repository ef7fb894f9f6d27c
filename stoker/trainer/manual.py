"""Manual optimization (``automatic_optimization = False``): the user steps the optimizers in ``training_step``.

Owns: the optimizer wrapper handed out by ``TrainingModule.optimizers()``, the manual training step the fit loop
runs instead of its own backward/step, ``manual_backward``, per-optimizer clipping, and the checks of Trainer
settings that only automatic optimization applies.

Rules (as in Lightning 2):

* Every applied ``optimizer.step()`` is one ``global_step``: a GAN stepping a discriminator and a generator on
  each of 320 batches ends at ``global_step == 640``; ``max_steps`` and ``ModelCheckpoint(every_n_train_steps)``
  count the same steps. An fp16 step skipped for overflow does not count (stoker's rule everywhere).
* The Trainer accumulates nothing, clips nothing and steps no scheduler: ``accumulate``/``clip_grad_norm``/
  ``clip_grad_value`` raise at ``fit`` (accumulate yourself: call ``step()`` every N batches; clip with
  ``self.clip_gradients``; step ``self.lr_schedulers()`` yourself).
* Several processes (DDP): ``training_step`` runs outside DDP's forward (whose reducer expects exactly one
  backward per forward, while a GAN makes several, each reaching only some parameters), so DDP's reducer stays
  idle; instead ``step()`` and ``clip_gradients`` average that optimizer's gradients across processes with one
  flattened all-reduce, once per optimizer per backward. Buffers (BatchNorm statistics) are not synchronised.
* ``step()`` runs the ``on_before_optimizer_step`` hooks (gradients already unscaled in fp16), then the prepared
  optimizer's step (fp16 scaling, skipped steps). ``on_before_zero_grad`` is not called (as in Lightning).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..accelerator import average_gradients
from .args import clip_algorithm

if TYPE_CHECKING:
    from ..accelerator import AcceleratedOptimizer, Accelerator
    from .parts import TrainerParts
    from .run import FitRun


class ModuleInFit(Protocol):
    """A ``TrainingModule`` during a fit, as ``manual_backward`` / ``clip_gradients`` use it (module.py imports
    this module, so it is not imported back)."""

    @property
    def trainer(self) -> TrainerParts: ...

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None: ...


class ManualOptimizer(torch.optim.Optimizer):
    """The optimizer ``self.optimizers()`` returns: ``step``/``zero_grad`` through the Accelerator, counted.

    A ``torch.optim.Optimizer`` to ``isinstance`` checks, as Lightning's wrapper is, though it holds no state of its
    own: everything other than ``step``/``zero_grad`` (``param_groups``, ``state``, ``state_dict``...) is the wrapped
    optimizer's; ``.optimizer`` is the prepared optimizer itself.
    """

    def __init__(self, optimizer: AcceleratedOptimizer, trainer: TrainerParts, ddp: bool = False) -> None:
        self.optimizer = optimizer
        self._trainer = trainer
        self._ddp = ddp
        self._synced = False  # gradients averaged across processes since the last manual_backward

    def gradients_changed(self) -> None:
        """A new backward ran: the gradients are to be averaged again before the next step."""
        self._synced = False

    def sync(self) -> None:
        """Under DDP, averages this optimizer's gradients across processes (once per backward)."""
        if not self._ddp or self._synced:
            return
        self._synced = True
        grads = [p.grad for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        average_gradients(self._trainer.accelerator.strategy, grads)

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step; ``closure`` (which may call ``manual_backward``) runs first, then the hooks, then the
        optimizer's ``step`` with ``kwargs``. It also gets a closure whose first call returns that result and whose
        later calls run ``closure`` again (an optimizer that evaluates the loss several times: LBFGS); under fp16
        loss scaling it gets none (the scaler steps without one)."""
        t = self._trainer
        acc = t.accelerator
        result = None
        if closure is not None:
            if not callable(closure):
                raise TypeError(f"optimizer.step(closure) needs a callable closure, got {type(closure).__name__}.")
            result = closure()
        self.sync()
        if t.hooks.has("on_before_optimizer_step"):
            acc.unscale_gradients(self.optimizer)  # the hooks see true (unscaled) gradients
            t.hooks.call("on_before_optimizer_step", self.optimizer.optimizer)  # the user's optimizer, as Lightning
        # Every applied step counts, also a second optimizer stepping on the same backward (Lightning's rule).
        self.optimizer.count_next_step()
        if closure is None or acc.precision.scales_loss:
            self.optimizer.step(**kwargs)
        else:
            self.optimizer.step(closure=self._evaluations(closure, result), **kwargs)
        return result

    def _evaluations(self, closure: Callable[[], Any], first: Any) -> Callable[[], Any]:
        """The closure the optimizer's ``step`` gets: ``first`` (``closure`` already ran for this step), then
        ``closure`` again, its new gradients averaged across processes like the first ones."""
        calls = 0

        def evaluate() -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                return first
            again = closure()
            self.sync()
            return again

        return evaluate

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the gradients of this optimizer's parameters."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    # torch.optim.Optimizer's own methods would read this wrapper, which never ran Optimizer.__init__: each one that
    # touches state is the wrapped optimizer's instead.
    param_groups = property(lambda self: self.optimizer.param_groups)
    state = property(lambda self: self.optimizer.state)
    defaults = property(lambda self: self.optimizer.defaults)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:
        if name in ("optimizer", "_trainer", "_ddp", "_synced"):  # not yet set (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self.optimizer!r})"


def check_manual(trainer: TrainerParts, module: torch.nn.Module) -> None:
    """Fails ``fit`` early on Trainer settings that manual optimization does not apply."""
    name = type(module).__name__
    fix = f" or switch {name} to automatic optimization."
    if trainer.accumulate != 1:
        raise ValueError(f"{name} uses manual optimization (automatic_optimization = False), so the Trainer does "
                         f"not accumulate gradients: remove Trainer(accumulate={trainer.accumulate}) and call "
                         "optimizer.step() every N batches yourself," + fix)
    for argument in ("clip_grad_norm", "clip_grad_value"):
        if getattr(trainer, argument) is not None:
            raise ValueError(f"{name} uses manual optimization (automatic_optimization = False), so the Trainer "
                             f"does not clip gradients: remove Trainer({argument}=...) and call "
                             "self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm) before "
                             "optimizer.step()," + fix)
    if trainer.on_nonfinite_loss == "skip":
        raise ValueError(f"Trainer(on_nonfinite_loss='skip') drops automatic optimizer steps; {name} steps its "
                         "optimizers itself (automatic_optimization = False). Use 'raise' or 'warn' and skip the "
                         "step in training_step yourself.")


def wrap_optimizers(trainer: TrainerParts, model: torch.nn.Module) -> list[ManualOptimizer]:
    """The prepared optimizers wrapped for manual optimization (built once per fit; ``model``: the prepared
    model)."""
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    return [ManualOptimizer(opt, trainer, ddp) for opt in trainer.prepared_optimizers]


def manual_training_step(run: FitRun, accelerator: Accelerator, batch: Any, batch_idx: int) -> Any:
    """Runs ``run``'s ``training_step`` under manual optimization: the step does its own backward and optimizer
    steps."""
    with accelerator.autocast():  # the precision's context (full precision: a cached no-op)
        outputs = run.training_step(batch, batch_idx)
    if outputs is not None and not isinstance(outputs, (torch.Tensor, Mapping)):
        raise TypeError(f"Under manual optimization training_step returns a tensor, a dict or None; got "
                        f"{type(outputs).__name__}.")
    return outputs


def manual_backward(module: ModuleInFit, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """``on_before_backward`` hooks, the module's ``backward`` (default: through the Accelerator, with fp16
    scaling), ``on_after_backward``. What ``Trainer.manual_backward`` runs."""
    t = module.trainer
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"manual_backward(loss) needs a tensor, got {type(loss).__name__}.")
    if not loss.requires_grad:
        from .losses import no_grad_error

        raise no_grad_error(loss)
    loop = t.fit_loop
    if t.nonfinite.watch(loss, t.accelerator.step, loop.epoch, max(loop.batches_done - 1, 0)):
        t.nonfinite.check(t.accelerator)
    for wrapper in _wrappers(t):
        wrapper.gradients_changed()
    hooks = t.hooks
    hooks.call("on_before_backward", loss)
    module.backward(loss, *args, **kwargs)  # the module's backward hook (default: through the Accelerator)
    hooks.call("on_after_backward")


def clip_gradients(module: ModuleInFit, optimizer: Any, gradient_clip_val: float | None,
                   gradient_clip_algorithm: str | None) -> None:
    """Clips the gradients of ``optimizer``'s parameters (unscaled first in fp16) by norm or by value."""
    if gradient_clip_val is None or gradient_clip_val == 0:
        return  # Lightning: no value means no clipping
    if isinstance(gradient_clip_val, bool) or not isinstance(gradient_clip_val, (int, float)) \
            or not gradient_clip_val > 0:
        raise ValueError(f"clip_gradients(gradient_clip_val={gradient_clip_val!r}): expected a number > 0.")
    algorithm = clip_algorithm(gradient_clip_algorithm, "clip_gradients(gradient_clip_algorithm=...)") or "norm"
    t = module.trainer
    wrapper = next((w for w in _wrappers(t) if optimizer is w or optimizer is w.optimizer), None)
    inner = optimizer.optimizer if isinstance(optimizer, ManualOptimizer) else optimizer
    acc = t.accelerator
    if not acc.sync_gradients:
        return
    if wrapper is not None:
        wrapper.sync()  # clip the averaged gradients
    acc.unscale_gradients(inner)
    params = [p for group in inner.param_groups for p in group["params"] if p.grad is not None]
    if algorithm == "norm":
        acc.strategy.clip_grad_norm_(params, float(gradient_clip_val))
    else:
        torch.nn.utils.clip_grad_value_(params, float(gradient_clip_val))


def _wrappers(trainer: TrainerParts) -> list[ManualOptimizer]:
    """The manual-optimization wrappers of the fit running (or last run); none before any fit."""
    run = trainer.fit_run
    return run.manual_optimizers if run is not None else []
