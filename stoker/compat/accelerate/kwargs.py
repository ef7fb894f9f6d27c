"""Accelerate's configuration objects for ``Accelerator(kwargs_handlers=[...])`` and its plugins.

Each handler is a dataclass with Accelerate's field names and defaults. ``to_kwargs()`` returns only the fields
that differ from the defaults, so that an untouched field never overrides stoker's own choice (for example the
process-group backend, which stoker picks from the device). What each handler changes:

* :class:`DistributedDataParallelKwargs`: the ``DistributedDataParallel`` arguments, and a communication hook.
* :class:`GradScalerKwargs`: the fp16 ``GradScaler``'s arguments (ignored for other precisions, as in Accelerate).
* :class:`InitProcessGroupKwargs`: the process group's backend and timeout.
* :class:`AutocastKwargs`: ``torch.autocast``'s ``enabled``/``cache_enabled`` for forward passes.
* :class:`ProfileKwargs`: what ``Accelerator.profile()`` records (``torch.profiler``).

This module owns the configuration objects only; ``options.py`` applies them to an Accelerator.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

from ...accelerator.arguments import InvalidArgumentValue, check_accumulation_steps


class KwargsHandler:
    """Base of the handler dataclasses: ``to_kwargs()`` is what differs from a default instance."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the class's defaults.

        Example:
            >>> DistributedDataParallelKwargs(find_unused_parameters=True).to_kwargs()
            {'find_unused_parameters': True}
        """
        default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if default.get(k) != v}


class DDPCommunicationHookType(str, enum.Enum):
    """A gradient communication hook of ``DistributedDataParallel`` (``torch.distributed.algorithms``)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments for ``torch.nn.parallel.DistributedDataParallel`` and an optional communication hook.

    ``comm_hook`` compresses (fp16/bf16) or low-rank approximates (PowerSGD, with ``comm_state_option`` passed to
    ``PowerSGDState``) the gradients before they are all-reduced; ``comm_wrapper`` (fp16/bf16) compresses what a
    PowerSGD hook sends.

    Example:
        >>> handler = DistributedDataParallelKwargs(find_unused_parameters=True, comm_hook="fp16")
        >>> accelerator = Accelerator(kwargs_handlers=[handler])
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.comm_hook = _hook_type(self.comm_hook, "comm_hook")
        self.comm_wrapper = _hook_type(self.comm_wrapper, "comm_wrapper")
        if self.comm_wrapper not in (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16,
                                     DDPCommunicationHookType.BF16):
            raise ValueError(f"DistributedDataParallelKwargs(comm_wrapper={self.comm_wrapper.value!r}) is not a "
                             "wrapper. Expected 'no', 'fp16' or 'bf16'.")

    def to_dict(self) -> dict[str, Any]:
        """The ``DistributedDataParallel`` arguments (the hook fields are applied separately)."""
        skip = ("comm_hook", "comm_wrapper", "comm_state_option")
        return {k: v for k, v in super().to_dict().items() if k not in skip}

    def register_comm_hook(self, model: torch.nn.Module) -> None:
        """Registers the configured hook on a ``DistributedDataParallel`` ``model`` (nothing when ``comm_hook='no'``)."""
        if self.comm_hook is DDPCommunicationHookType.NO:
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        hooks = {DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
                 DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
                 DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
                 DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook}
        wrappers = {DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
                    DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper}
        hook = hooks[self.comm_hook]
        if self.comm_wrapper in wrappers:
            hook = wrappers[self.comm_wrapper](hook)
        power_sgd = self.comm_hook in (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
        state = powerSGD_hook.PowerSGDState(None, **self.comm_state_option) if power_sgd else None
        model.register_comm_hook(state=state, hook=hook)


def _hook_type(value: Any, name: str) -> DDPCommunicationHookType:
    raw = getattr(value, "value", value)  # also Accelerate's own enum members
    try:
        return DDPCommunicationHookType(raw.lower() if isinstance(raw, str) else raw)
    except ValueError:
        choices = ", ".join(repr(h.value) for h in DDPCommunicationHookType)
        raise ValueError(f"DistributedDataParallelKwargs({name}={value!r}) is not a hook. Expected one of: "
                         f"{choices}.") from None


@dataclasses.dataclass
class GradScalerKwargs(KwargsHandler):
    """Arguments for the fp16 ``torch.amp.GradScaler`` (ignored unless ``mixed_precision='fp16'``).

    Example:
        >>> Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024)])
    """

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclasses.dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """The process group's ``backend`` and ``timeout`` (``init_method`` is not used: stoker joins through the
    launcher's environment).

    Only fields changed from the defaults apply: leaving ``backend`` at its default keeps stoker's choice (NCCL on
    CUDA, gloo on CPU). The default timeout is 30 minutes, 10 with NCCL.

    Example:
        >>> Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))])
    """

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.timeout is None:
            self.timeout = timedelta(seconds=600 if self.backend == "nccl" else 1800)
        elif not isinstance(self.timeout, timedelta):
            raise TypeError(f"InitProcessGroupKwargs(timeout={self.timeout!r}) must be a datetime.timedelta, e.g. "
                            "timedelta(minutes=5).")


@dataclasses.dataclass
class AutocastKwargs(KwargsHandler):
    """``torch.autocast``'s ``enabled`` and ``cache_enabled`` for the prepared models' forward passes and for
    ``Accelerator.autocast()``.

    Example:
        >>> Accelerator(mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(cache_enabled=True)])
    """

    enabled: bool = True
    cache_enabled: bool | None = None


_ACTIVITIES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}


@dataclasses.dataclass
class ProfileKwargs(KwargsHandler):
    """What ``Accelerator.profile()`` records with ``torch.profiler``.

    ``schedule_option`` is passed to ``torch.profiler.schedule`` (``wait``, ``warmup``, ``active``, ``repeat``,
    ``skip_first``); with ``output_trace_dir`` each process writes ``profile_{process_index}.json`` (a Chrome
    trace) there when the block ends.

    Example:
        >>> with accelerator.profile(ProfileKwargs(activities=["cpu"], record_shapes=True)) as prof:
        ...     model(x)
        >>> print(prof.key_averages().table(row_limit=5))
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | os.PathLike | None = None

    def _activity(self, name: str) -> Any:
        key = name.lower() if isinstance(name, str) else name
        found = getattr(torch.profiler.ProfilerActivity, _ACTIVITIES.get(key, ""), None)
        if found is None:
            raise ValueError(f"ProfileKwargs(activities=[{name!r}]) is not a profiler activity. Expected some of: "
                             f"{', '.join(repr(k) for k in _ACTIVITIES)}.")
        return found

    def build(self) -> torch.profiler.profile:
        """The ``torch.profiler.profile`` object these settings describe (not yet started)."""
        activities = None if self.activities is None else [self._activity(a) for a in self.activities]
        schedule = None if self.schedule_option is None else torch.profiler.schedule(**self.schedule_option)
        return torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=self.on_trace_ready,
                                      record_shapes=self.record_shapes, profile_memory=self.profile_memory,
                                      with_stack=self.with_stack, with_flops=self.with_flops,
                                      with_modules=self.with_modules)


@dataclasses.dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """Accumulation settings, for ``Accelerator(gradient_accumulation_plugin=...)``.

    Attributes:
        num_steps: Micro-batches per optimizer step (the same as ``gradient_accumulation_steps``).
        adjust_scheduler: True or False, with the same effect. In Accelerate 1.16 neither value changes anything a
            script sees (``to_kwargs()`` drops the default True, and the scheduler reads the flag from there, so its
            ``_step_count`` is never advanced on micro-steps); stoker's prepared schedulers step once per real
            optimizer step, as Accelerate's do with either value.
        sync_with_dataloader: True (the default): the last batch of a prepared loader closes the window early, and
            ``backward`` divides by that shorter window's true length. False: the window closes every ``num_steps``
            micro-batches wherever the loaders end (it may span two epochs or two loaders), ``backward`` divides by
            ``num_steps``, and a window still open when training stops keeps its gradients without updating the
            weights (``save_state`` keeps them too); Accelerate's rule.
        sync_each_batch: Synchronise gradients across processes on every micro-batch, not only on the last one of
            a window (less memory with FSDP, more communication).

    Example:
        >>> plugin = GradientAccumulationPlugin(num_steps=4, sync_with_dataloader=False)
        >>> Accelerator(gradient_accumulation_plugin=plugin)
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is None:
            raise InvalidArgumentValue("GradientAccumulationPlugin(num_steps=...) is required: the number of "
                                       "micro-batches per optimizer step, e.g. GradientAccumulationPlugin(num_steps=4).")
        check_accumulation_steps(self.num_steps, argument="GradientAccumulationPlugin(num_steps=...)")
        if not isinstance(self.sync_with_dataloader, bool):
            raise TypeError(f"GradientAccumulationPlugin(sync_with_dataloader={self.sync_with_dataloader!r}) must be "
                            "True (a loader's end closes the window) or False (windows run across loader ends).")
        if not isinstance(self.adjust_scheduler, bool):
            raise TypeError(f"GradientAccumulationPlugin(adjust_scheduler={self.adjust_scheduler!r}) must be True or "
                            "False.")


class DynamoBackend(str, enum.Enum):
    """A ``torch.compile`` backend (``Accelerator(dynamo_backend=...)``); ``NO`` compiles nothing."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    TVM = "TVM"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class TorchDynamoPlugin(KwargsHandler):
    """``torch.compile`` settings applied by ``prepare`` to every model (after DDP/FSDP wrapping).

    Example:
        >>> Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor", mode="reduce-overhead"))
    """

    backend: DynamoBackend | str = "no"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    disable: bool = False

    def __post_init__(self) -> None:
        value = self.backend.upper() if isinstance(self.backend, str) else self.backend
        try:
            self.backend = DynamoBackend(value)
        except ValueError:
            choices = ", ".join(repr(b.value.lower()) for b in DynamoBackend)
            raise ValueError(f"dynamo_backend={self.backend!r} is not a torch.compile backend. Expected one of: "
                             f"{choices}.") from None

    def compile_kwargs(self) -> dict[str, Any] | None:
        """The ``torch.compile`` arguments, or None when nothing is to be compiled."""
        if self.backend is DynamoBackend.NO or self.disable:
            return None
        kwargs: dict[str, Any] = {"backend": self.backend.value.lower(), "fullgraph": self.fullgraph}
        if self.mode is not None and self.mode != "default":
            kwargs["mode"] = self.mode
        if self.dynamic is not None:
            kwargs["dynamic"] = self.dynamic
        return kwargs


class DeepSpeedPlugin:
    """Accepted as a name so that imports keep working; constructing one explains what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(DEEPSPEED_UNSUPPORTED)


DEEPSPEED_UNSUPPORTED = (
    "DeepSpeed is not supported by stoker. Use FSDP instead, which shards parameters, gradients and optimizer "
    "state like ZeRO-3: Accelerator(strategy='fsdp') or Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...))"
    " under `torchrun`."
)

HANDLER_TYPES = (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, AutocastKwargs,
                 ProfileKwargs)


def collect_handlers(handlers: Any) -> dict[type, KwargsHandler]:
    """Validates ``Accelerator(kwargs_handlers=...)``: one handler per type, each of a known type.

    A handler object from Accelerate itself (``accelerate.utils.DistributedDataParallelKwargs``) is converted to
    stoker's class of the same name, so a half-ported script still works.
    """
    if handlers is None:
        return {}
    if not isinstance(handlers, (list, tuple)):
        raise TypeError(f"Accelerator(kwargs_handlers={handlers!r}) must be a list of handlers, e.g. "
                        "kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)].")
    by_name = {cls.__name__: cls for cls in HANDLER_TYPES}
    found: dict[type, KwargsHandler] = {}
    for handler in handlers:
        cls = by_name.get(type(handler).__name__)
        if cls is None:
            raise TypeError(
                f"Accelerator(kwargs_handlers=[...]) got a {type(handler).__name__}, which stoker does not support. "
                f"Supported: {', '.join(by_name)} (from stoker.utils)."
            )
        if not isinstance(handler, cls):  # Accelerate's own class of that name
            names = {f.name for f in dataclasses.fields(cls)}
            handler = cls(**{k: v for k, v in vars(handler).items() if k in names})
        if cls in found:
            raise ValueError(f"Accelerator(kwargs_handlers=[...]) got two {cls.__name__} objects; pass one.")
        found[cls] = handler
    return found
