"""The Accelerator's Accelerate-style constructor options, validated once and applied where they belong.

``AcceleratorOptions`` takes ``kwargs_handlers``, the plugins, ``split_batches``, ``rng_types`` and
``dynamo_backend`` as the user passed them, raises clear errors for what stoker does not support, and then
hands each piece to its owner in the core: process-group and DDP options to the strategy it builds, scaler and
autocast options to the precision object, ``sync_each_batch``, ``sync_with_dataloader`` and the ``rng_types``
syncing to the Accelerator.
The compat Accelerator keeps the object for what is used later (profiling, compiling).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from ...accelerator.config import DataLoaderConfiguration
from ...accelerator.distributed.strategy import DDPStrategy, SingleDevice, make_strategy
from .kwargs import (DEEPSPEED_UNSUPPORTED, AutocastKwargs, DistributedDataParallelKwargs, GradientAccumulationPlugin,
                     GradScalerKwargs, InitProcessGroupKwargs, ProfileKwargs, TorchDynamoPlugin, collect_handlers)

if TYPE_CHECKING:
    from ...accelerator.data.loader import LoaderContext
    from ...accelerator.step.precision import Precision

RNG_TYPES = ("torch", "cuda", "mps", "xpu", "generator")


class AcceleratorOptions:
    """Validated constructor options (see the module docstring)."""

    def __init__(self, *, kwargs_handlers: Any = None, fsdp_plugin: Any = None, deepspeed_plugin: Any = None,
                 gradient_accumulation_plugin: Any = None, dynamo_backend: Any = None, dynamo_plugin: Any = None,
                 rng_types: Any = None, split_batches: bool | None = None) -> None:
        if deepspeed_plugin is not None:
            raise ValueError(f"Accelerator(deepspeed_plugin=...): {DEEPSPEED_UNSUPPORTED}")
        handlers = collect_handlers(kwargs_handlers)
        self.ddp: DistributedDataParallelKwargs | None = handlers.get(DistributedDataParallelKwargs)  # type: ignore
        self.scaler: GradScalerKwargs | None = handlers.get(GradScalerKwargs)  # type: ignore[assignment]
        self.init: InitProcessGroupKwargs | None = handlers.get(InitProcessGroupKwargs)  # type: ignore[assignment]
        self.autocast: AutocastKwargs | None = handlers.get(AutocastKwargs)  # type: ignore[assignment]
        self.profile: ProfileKwargs | None = handlers.get(ProfileKwargs)  # type: ignore[assignment]
        if fsdp_plugin is not None and type(fsdp_plugin).__name__ != "FullyShardedDataParallelPlugin":
            raise TypeError(f"Accelerator(fsdp_plugin=...) must be a FullyShardedDataParallelPlugin (from "
                            f"stoker.utils), got {type(fsdp_plugin).__name__}.")
        self.fsdp_plugin = _own_fsdp_plugin(fsdp_plugin)
        self.accumulation = _own(gradient_accumulation_plugin, GradientAccumulationPlugin,
                                 "gradient_accumulation_plugin")
        self.dynamo = self._dynamo(dynamo_backend, dynamo_plugin)
        self.rng_types = self._rng_types(rng_types)
        self._global_rng_types = [t for t in self.rng_types if t != "generator"]
        self.split_batches = split_batches

    @property
    def syncs_rng(self) -> bool:
        """``rng_types`` names global generators (``"torch"``, the device's): see :meth:`epoch_started`."""
        return bool(self._global_rng_types)

    def epoch_started(self, context: LoaderContext) -> None:
        """A prepared loader starts an iteration: with ``rng_types`` naming global generators, every process takes
        process 0's states, as Accelerate does. (``"generator"``, the default, needs nothing: a prepared loader's
        own generator is seeded alike on every process.)"""
        if context.strategy.num_processes > 1:
            from .operations import synchronize_rng_states

            synchronize_rng_states(self._global_rng_types)

    @property
    def sync_each_batch(self) -> bool:
        return bool(self.accumulation is not None and self.accumulation.sync_each_batch)

    @property
    def sync_with_dataloader(self) -> bool:
        return self.accumulation is None or self.accumulation.sync_with_dataloader

    # -- validation ---------------------------------------------------------------------------------------------
    @staticmethod
    def _dynamo(backend: Any, plugin: Any) -> TorchDynamoPlugin | None:
        if backend is not None and plugin is not None:
            raise ValueError("Accelerator got both dynamo_backend and dynamo_plugin: pass one (the plugin can hold "
                             "the backend: TorchDynamoPlugin(backend=...)).")
        if plugin is not None:
            return _own(plugin, TorchDynamoPlugin, "dynamo_plugin")
        if backend is None:
            return None
        return TorchDynamoPlugin(backend=getattr(backend, "value", backend))

    @staticmethod
    def _rng_types(rng_types: Any) -> list[str]:
        if rng_types is None:
            return ["generator"]
        values = [str(getattr(r, "value", r)).lower() for r in rng_types]
        bad = [v for v in values if v not in RNG_TYPES]
        if bad:
            raise ValueError(f"Accelerator(rng_types={list(rng_types)!r}): {bad} are not RNG types. Expected some "
                             f"of: {', '.join(repr(r) for r in RNG_TYPES)}.")
        return values

    def gradient_accumulation_steps(self, steps: int | None) -> int | None:
        """The window length: ``gradient_accumulation_steps``, or the plugin's ``num_steps`` (None: not given)."""
        if self.accumulation is None:
            return steps
        if steps not in (None, 1):
            raise ValueError("Accelerator got both gradient_accumulation_steps and gradient_accumulation_plugin: "
                             "pass one (the plugin's num_steps is the window length).")
        return self.accumulation.num_steps  # type: ignore[return-value]

    def dataloader_config(self, config: Any) -> Any:
        """``config`` with ``split_batches`` applied (a new default config when none was given)."""
        if self.split_batches is None:
            return config
        if config is not None:
            if config.split_batches != self.split_batches:
                raise ValueError(f"Accelerator(split_batches={self.split_batches}) contradicts dataloader_config="
                                 f"DataLoaderConfiguration(split_batches={config.split_batches}): set it in one place "
                                 "(DataLoaderConfiguration is the current one).")
            return config
        return DataLoaderConfiguration(split_batches=bool(self.split_batches))

    # -- applying -----------------------------------------------------------------------------------------------
    def make_strategy(self, strategy: Any, cpu: bool) -> SingleDevice:
        """The strategy for ``Accelerator(strategy=...)``, with the process-group, DDP and FSDP options."""
        group, ddp = self.strategy_options()
        if self.fsdp_plugin is not None:
            if not (isinstance(strategy, str) and strategy.lower() in ("auto", "fsdp")):
                raise ValueError(f"Accelerator(fsdp_plugin=..., strategy={strategy!r}): the plugin asks for FSDP; "
                                 "leave strategy='auto' (or 'fsdp').")
            strategy = self.fsdp_plugin.to_strategy(group)
        elif isinstance(strategy, DDPStrategy) and (group or ddp):
            _configure_object(strategy, group, ddp)
        return make_strategy(strategy, cpu=cpu, group_options=group, ddp_options=ddp)

    def strategy_options(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(process-group options, DDP options)`` from ``InitProcessGroupKwargs`` and
        ``DistributedDataParallelKwargs``: only what differs from their defaults, plus the comm hook."""
        group: dict[str, Any] = {}
        if self.init is not None:
            changed = self.init.to_kwargs()
            group = {k: changed[k] for k in ("backend", "timeout") if k in changed}
            if "timeout" not in group and "backend" in group:
                group["timeout"] = self.init.timeout  # the new backend's default, as InitProcessGroupKwargs sets it
        ddp = dict(self.ddp.to_kwargs()) if self.ddp is not None else {}
        if self.ddp is not None and self.ddp.comm_hook.value != "no":
            ddp["comm_hook"] = self.ddp.register_comm_hook
        return group, ddp

    def setup_precision(self, precision: Precision) -> None:
        """Applies ``GradScalerKwargs`` (fp16 only, as in Accelerate) and ``AutocastKwargs``."""
        scaler = precision.scaler
        if self.scaler is not None and scaler is not None:
            precision.scaler = type(scaler)(precision.device.type, **self.scaler.to_kwargs())
        if self.autocast is not None and hasattr(precision, "autocast_kwargs"):
            precision.autocast_kwargs.update(self.autocast.to_kwargs())

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        """``torch.compile(model)`` with the dynamo settings (the model itself when there are none)."""
        kwargs = self.dynamo.compile_kwargs() if self.dynamo is not None else None
        if kwargs is None or isinstance(model, _compiled_type()):
            return model
        return torch.compile(model, **kwargs)


def _compiled_type() -> type:
    from torch._dynamo.eval_frame import OptimizedModule  # only reached when compiling anyway

    return OptimizedModule


def _own(value: Any, cls: type, argument: str) -> Any:
    """``value`` as stoker's ``cls`` (also accepting Accelerate's class of the same name), or None."""
    if value is None or isinstance(value, cls):
        return value
    if type(value).__name__ != cls.__name__ or not dataclasses.is_dataclass(value):
        raise TypeError(f"Accelerator({argument}=...) must be a {cls.__name__} (from stoker.utils), got "
                        f"{type(value).__name__}.")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: getattr(value, k) for k in names if hasattr(value, k)})


def _own_fsdp_plugin(plugin: Any) -> Any:
    from .fsdp_plugin import FullyShardedDataParallelPlugin

    if plugin is None or isinstance(plugin, FullyShardedDataParallelPlugin):
        return plugin
    # Accelerate's own plugin fills every field from its defaults: keep only what differs from them.
    names = {f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin)}
    defaults = type(plugin)() if callable(type(plugin)) else None
    given = {k: getattr(plugin, k) for k in names if hasattr(plugin, k)
             and (defaults is None or getattr(defaults, k, None) != getattr(plugin, k))}
    return FullyShardedDataParallelPlugin(**given)


def _configure_object(strategy: Any, group: dict[str, Any], ddp: dict[str, Any]) -> None:
    """Applies kwargs handlers to a strategy object the user built (its own settings win)."""
    for key, value in group.items():
        if getattr(strategy, key, None) is None:
            setattr(strategy, key, value)
    hook = ddp.pop("comm_hook", None)
    if hook is not None and strategy.comm_hook is None:
        strategy.comm_hook = hook
    if not getattr(strategy, "shards_parameters", False):
        strategy.ddp_kwargs = {**ddp, **strategy.ddp_kwargs}
