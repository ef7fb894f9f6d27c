"""Precision: one object per mode, the only place precision strings are parsed.

A precision object owns everything numeric about a step: the autocast context, the loss scale (fp16's
``GradScaler``), unscaling, and whether an optimizer step really happened. The Accelerator holds one and never
branches on the mode itself.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .operations import convert_to_fp32

_ALIASES = {
    "no": "no", "fp32": "no", "32": "no", "32-true": "no", "float32": "no",
    "fp16": "fp16", "16": "fp16", "16-mixed": "fp16", "float16": "fp16",
    "bf16": "bf16", "bf16-mixed": "bf16", "bfloat16": "bf16",
}
PRECISION_CHOICES = ("no", "fp16", "bf16")


def canonical_precision(value: Any, *, argument: str = "Accelerator(mixed_precision=...)") -> str:
    """Returns "no", "fp16" or "bf16" for a precision name or alias; raises ``ValueError`` for anything else."""
    if value is None:  # Accelerate's own default: full precision unless configured
        return "no"
    key = value.lower() if isinstance(value, str) else str(value) if isinstance(value, int) else None
    if key is None or key not in _ALIASES:
        raise ValueError(
            f"{argument.replace('...', repr(value))} is not a precision. Expected one of: 'no' (or 'fp32', '32'), "
            "'fp16' (or '16-mixed'), 'bf16' (or 'bf16-mixed')."
        )
    return _ALIASES[key]


class Precision:
    """Full precision: every method is a no-op, so the fp32 step costs nothing extra."""

    name = "no"
    dtype: torch.dtype | None = None

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context under which forward passes run."""
        return contextlib.nullcontext()

    def wrap_forward(self, module: torch.nn.Module) -> None:
        """Makes ``module``'s forward run under :meth:`autocast` (no-op here)."""

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divides ``optimizer``'s gradients by the loss scale; called at most once per step."""

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable | None = None) -> bool:
        """Steps ``optimizer``; returns False when the step was skipped (fp16 overflow)."""
        optimizer.step(closure) if closure is not None else optimizer.step()
        return True

    def update(self) -> None:
        """Finishes a step for all optimizers (the fp16 scale update); safe to call when nothing is pending."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class MixedPrecision(Precision):
    """Autocast to a lower-precision dtype; forward outputs are cast back to float32."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(device)
        self.dtype = dtype
        self._device_type = device.type

    def autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self._device_type, dtype=self.dtype)

    def wrap_forward(self, module: torch.nn.Module) -> None:
        if getattr(module.forward, "_stoker_autocast", False):
            return  # prepared twice: one wrapper is enough
        original = module.forward
        device_type, dtype = self._device_type, self.dtype

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type, dtype=dtype):
                outputs = original(*args, **kwargs)
            # Losses computed outside the model then run in float32, as users expect.
            return convert_to_fp32(outputs)

        forward._stoker_autocast = True  # type: ignore[attr-defined]
        forward._stoker_original_forward = original  # type: ignore[attr-defined]
        module.forward = forward


class BF16Precision(MixedPrecision):
    name = "bf16"

    def __init__(self, device: torch.device) -> None:
        super().__init__(device, torch.bfloat16)


class FP16Precision(MixedPrecision):
    """float16 autocast plus a ``torch.amp.GradScaler`` — on CUDA and on CPU alike.

    The scale update is deferred until every optimizer of the step has stepped (the next backward, or a
    checkpoint), so several optimizers share one consistent scale.
    """

    name = "fp16"

    def __init__(self, device: torch.device) -> None:
        super().__init__(device, torch.float16)
        self.scaler = torch.amp.GradScaler(device.type)
        self._update_pending = False
        self._unscaled: set[int] = set()
        # optimizer -> handle of its post-step hook that sets _stepped (weak: a new optimizer may reuse an old id)
        self._step_hooks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stepped = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        self.update()
        return self.scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable | None = None) -> bool:
        self.unscale_(optimizer)
        self._update_pending = True
        args = () if closure is None else (closure,)
        hookable = hasattr(optimizer, "_optimizer_step_post_hooks")  # set by Optimizer.__init__
        if getattr(optimizer, "_step_supports_amp_scaling", False) or not hookable:
            # Fused optimizers skip on the device, so the scaler never reads found_inf: this read is the one sync.
            found = self.scaler._found_inf_per_device(optimizer)  # filled by unscale_ above
            self.scaler.step(optimizer, *args)
            return not sum(found.values()).item()
        # The scaler reads found_inf on the host once (its one sync per step) and calls optimizer.step() only when
        # finite: a post-step hook tells us which without reading it a second time.
        if optimizer not in self._step_hooks:
            self._step_hooks[optimizer] = optimizer.register_step_post_hook(self._mark_stepped)
        self._stepped = False
        self.scaler.step(optimizer, *args)
        return self._stepped

    def _mark_stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True

    def update(self) -> None:
        if self._update_pending:
            self.scaler.update()
            self._update_pending = False
        self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        self.update()
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])


def make_precision(value: Any, device: torch.device) -> Precision:
    """Builds the precision object for a name or alias (see :func:`canonical_precision`)."""
    name = canonical_precision(value)
    if name == "fp16":
        return FP16Precision(device)
    if name == "bf16":
        return BF16Precision(device)
    return Precision(device)


def unwrap_forward(module: torch.nn.Module) -> None:
    """Removes an autocast wrapper that :meth:`MixedPrecision.wrap_forward` put on ``module``."""
    forward = module.__dict__.get("forward")
    while forward is not None and getattr(forward, "_stoker_autocast", False):
        original = forward._stoker_original_forward
        if getattr(original, "__self__", None) is module and getattr(original, "__func__", None) is getattr(
            type(module), "forward", None
        ):
            del module.__dict__["forward"]  # back to the class's own method
            return
        module.forward = original
        forward = module.__dict__.get("forward")


def iter_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]
