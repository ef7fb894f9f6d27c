"""Precision: one object per mode, the only place precision strings are parsed (:func:`parse_precision`).

A precision object owns everything numeric about a step: the autocast context (both the forward wrapper put on a
prepared module and the ``autocast()`` context a loop enters), the loss scale (fp16's ``GradScaler``), unscaling,
and whether an optimizer step really happened. The Accelerator holds one and never branches on the mode itself.
Whether a step's gradients were already unscaled is not tracked here: the accumulation window (``window.py``)
calls :meth:`Precision.unscale_` exactly once per optimizer per step.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..operations import apply_to_tensors, convert_to_fp32
from .torch_shortcuts import optimizer_step

_F32, _F16, _BF16, _F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
# Every precision name: (the mode, the dtype it names). The one table: parse_precision reads the mode, dtype_named
# the dtype (FSDP's mixed-precision policy names dtypes this way; "no" keeps the parameters' dtype).
_NAMES: dict[str, tuple[str, torch.dtype | None]] = {
    "no": ("no", None), "fp32": ("no", _F32), "32": ("no", _F32), "32-true": ("no", _F32), "float32": ("no", _F32),
    "fp16": ("fp16", _F16), "16": ("fp16", _F16), "16-mixed": ("fp16", _F16), "float16": ("fp16", _F16),
    "bf16": ("bf16", _BF16), "bf16-mixed": ("bf16", _BF16), "bfloat16": ("bf16", _BF16),
    # True half precision (Lightning's names): the weights themselves are in that dtype, no autocast, no scaler.
    "bf16-true": ("bf16-true", _BF16), "16-true": ("fp16-true", _F16), "fp16-true": ("fp16-true", _F16),
    # Double precision (Lightning's "64-true"): the weights and the inputs in float64.
    "64-true": ("fp64-true", _F64), "64": ("fp64-true", _F64), "fp64-true": ("fp64-true", _F64),
}
_TRUE = ("bf16-true", "fp16-true", "fp64-true")


def parse_precision(value: Any, *, argument: str = "Accelerator(mixed_precision=...)") -> str:
    """Returns "no", "fp16", "bf16" (mixed: autocast) or "bf16-true", "fp16-true", "fp64-true" (the weights in that
    dtype) for a precision name or alias; raises ``ValueError`` for anything else.

    ``argument`` names where the value came from in the error message, e.g. ``"Trainer(precision=...)"``.

    Example:
        >>> parse_precision("16-mixed"), parse_precision("fp32"), parse_precision(None)
        ('fp16', 'no', 'no')
    """
    if value is None:  # Accelerate's own default: full precision unless configured
        return "no"
    return _NAMES[_key(value, argument)][0]


def dtype_named(value: Any, *, argument: str) -> torch.dtype | None:
    """The dtype a precision name stands for (``"bf16"``, ``"float32"``, ...; None for ``"no"``)."""
    return _NAMES[_key(value, argument)][1]


def _key(value: Any, argument: str) -> str:
    key = value.lower() if isinstance(value, str) else str(value) if isinstance(value, int) else None
    if key is None or key not in _NAMES:
        raise ValueError(
            f"{argument.replace('...', repr(value))} is not a precision. Expected one of: 'no' (or 'fp32', '32'), "
            "'fp16' (or '16-mixed'), 'bf16' (or 'bf16-mixed'), 'bf16-true', 'fp16-true' (or '16-true'), 'fp64-true' "
            "(or '64-true')."
        )
    return key


# One shared no-op context: full precision pays one method call, not an object, per ``autocast()``.
_NO_AUTOCAST = contextlib.nullcontext()


class Precision:
    """Full precision: every method is a no-op, so the fp32 step costs nothing extra."""

    name = "no"
    dtype: torch.dtype | None = None
    # The dtype a model's weights take when prepared (true precisions), None when they keep their own: what a
    # module built for this precision should be created in (Lightning's ``trainer.init_module()``).
    weights_dtype: torch.dtype | None = None
    # True when backward multiplies losses by a large factor (fp16's loss scale): the window then divides a summed
    # loss by a power of two near its item count first, so the scaled gradients stay in fp16's range.
    scales_loss = False
    # True when :meth:`autocast` returns a real ``torch.autocast`` context; when False it is a no-op, and a loop
    # that enters it every step (the Trainer's) may skip entering it.
    autocasts = False
    # True when :meth:`state_dict` holds something to checkpoint (fp16's grad scaler): ``save_state`` writes
    # ``scaler.safetensors`` only then, as Accelerate writes ``scaler.pt`` only with a scaler.
    has_state = False
    # fp16's loss scaler (torch.amp.GradScaler, or FSDP's sharded one); None for the precisions that need none.
    scaler: torch.amp.GradScaler | None = None
    # True when :meth:`convert_input` changes data (true precisions): a loop that feeds batches to a module may then
    # convert each batch, and skips the call otherwise.
    converts_input = False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def autocast(self, **overrides: Any) -> contextlib.AbstractContextManager:
        """The context under which forward passes run (a cached no-op here; ``overrides``: ``torch.autocast``
        arguments, for mixed precisions)."""
        return _NO_AUTOCAST

    def autocast_calls(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` made to run under :meth:`autocast` on every call; here ``fn`` itself (no cost per call)."""
        return fn

    def wrap_forward(self, module: torch.nn.Module, autocast: bool = True) -> None:
        """Makes ``module``'s forward run under :meth:`autocast`; here: removes another precision's wrapper.

        ``autocast=False``: no autocast wrapper (the caller enters :meth:`autocast` around its step itself); true
        half precision still converts the module and its inputs (that is the data's dtype, not autocast)."""
        unwrap_forward(module)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def convert_input(self, data: Any) -> Any:
        """``data`` as the module computes in (true precisions: its floating-point tensors in that dtype, in any
        container ``operations.apply_to_tensors`` rebuilds); here ``data`` itself."""
        return data

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, of the scaled loss where this precision scales losses."""
        loss.backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divides ``optimizer``'s gradients by the loss scale; the window calls it exactly once per step."""

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable | None = None, **kwargs: Any) -> bool:
        """Steps ``optimizer`` (whose gradients the window finished), ``kwargs`` passed on to its ``step``; False
        when skipped (fp16 overflow)."""
        if closure is not None:
            optimizer.step(closure=closure, **kwargs)
        elif kwargs:
            optimizer.step(**kwargs)
        else:
            optimizer_step(optimizer)
        return True

    def update(self) -> None:
        """Finishes a step for all optimizers (the fp16 scale update); safe to call when nothing is pending."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class MixedPrecision(Precision):
    """Autocast to a lower-precision dtype; forward outputs are cast back to float32."""

    autocasts = True

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(device)
        self.dtype = dtype
        self._device_type = device.type
        self.autocast_kwargs: dict[str, Any] = {}  # more torch.autocast arguments (AutocastKwargs)

    def autocast(self, **overrides: Any) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self._device_type, dtype=self.dtype, **{**self.autocast_kwargs, **overrides})

    def autocast_calls(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def under_autocast(*args: Any, **kwargs: Any) -> Any:
            with self.autocast():
                return fn(*args, **kwargs)

        return under_autocast

    def wrap_forward(self, module: torch.nn.Module, autocast: bool = True) -> None:
        if not autocast:
            unwrap_forward(module)
            return
        device_type, dtype, extra = self._device_type, self.dtype, self.autocast_kwargs
        current = module.__dict__.get("forward")
        if getattr(current, "_stoker_autocast", None) == (device_type, dtype):
            return  # prepared twice: one wrapper is enough
        unwrap_forward(module)  # another precision's wrapper (an earlier run on this module) is replaced
        original = module.forward

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type, dtype=dtype, **extra):
                outputs = original(*args, **kwargs)
            # Losses computed outside the model then run in float32, as users expect.
            return convert_to_fp32(outputs)

        forward._stoker_autocast = (device_type, dtype)  # type: ignore[attr-defined]
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
    scales_loss = True
    has_state = True

    def __init__(self, device: torch.device) -> None:
        super().__init__(device, torch.float16)
        self.scaler = torch.amp.GradScaler(device.type)
        self._update_pending = False
        # optimizer -> handle of its post-step hook that sets _stepped (weak: a new optimizer may reuse an old id)
        self._step_hooks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stepped = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        self.update()
        return self.scaler.scale(loss)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scale_loss(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable | None = None, **kwargs: Any) -> bool:
        self._update_pending = True
        args = () if closure is None else (closure,)
        hookable = hasattr(optimizer, "_optimizer_step_post_hooks")  # set by Optimizer.__init__
        if getattr(optimizer, "_step_supports_amp_scaling", False) or not hookable:
            # Fused optimizers skip on the device, so the scaler never reads found_inf: this read is the one sync.
            found = self.scaler._found_inf_per_device(optimizer)  # filled when the window unscaled
            self.scaler.step(optimizer, *args, **kwargs)
            return not sum(found.values()).item()
        # The scaler reads found_inf on the host once (its one sync per step) and calls optimizer.step() only when
        # finite: a post-step hook tells us which without reading it a second time.
        if optimizer not in self._step_hooks:
            self._step_hooks[optimizer] = optimizer.register_step_post_hook(self._mark_stepped)
        self._stepped = False
        self.scaler.step(optimizer, *args, **kwargs)
        return self._stepped

    def _mark_stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True

    def update(self) -> None:
        if self._update_pending:
            self.scaler.update()
            self._update_pending = False

    def state_dict(self) -> dict[str, Any]:
        self.update()
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])


class TruePrecision(Precision):
    """True precision: a prepared module's parameters and buffers are converted to bf16/fp16 (or float64), and the
    floating-point tensors passed to its forward too (no autocast, no loss scaling: fp16-true can overflow)."""

    converts_input = True

    def __init__(self, device: torch.device, name: str) -> None:
        super().__init__(device)
        self.name = name
        self.dtype = self.weights_dtype = dtype_named(name, argument="precision")

    def convert_input(self, data: Any) -> Any:
        dtype = self.dtype
        return apply_to_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, data)

    def autocast(self, **overrides: Any) -> contextlib.AbstractContextManager:
        """Not torch's autocast: a context in which tensors created without a ``dtype`` take the weights' (the
        default dtype, as Lightning sets it around steps), so that ``torch.zeros(n)`` in a step does not bring float32
        into a bf16 computation."""
        return _default_dtype(self.dtype)

    def autocast_calls(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        dtype = self.dtype

        @functools.wraps(fn)
        def in_dtype(*args: Any, **kwargs: Any) -> Any:
            with _default_dtype(dtype):
                return fn(*args, **kwargs)
        return in_dtype

    def wrap_forward(self, module: torch.nn.Module, autocast: bool = True) -> None:
        unwrap_forward(module)
        module.to(self.dtype)
        original, cast = module.forward, self.convert_input

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            return original(*cast(args), **cast(kwargs))

        forward._stoker_autocast = ("true", self.dtype)  # type: ignore[attr-defined]
        forward._stoker_original_forward = original  # type: ignore[attr-defined]
        module.forward = forward


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def make_precision(value: Any, device: torch.device) -> Precision:
    """Builds the precision object for a name or alias (see :func:`parse_precision`)."""
    name = parse_precision(value)
    if name == "fp16":
        return FP16Precision(device)
    if name == "bf16":
        return BF16Precision(device)
    if name in _TRUE:
        return TruePrecision(device, name)
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
