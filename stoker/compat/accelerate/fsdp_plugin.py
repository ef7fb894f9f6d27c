"""Accelerate's ``FullyShardedDataParallelPlugin``, mapped onto stoker's FSDP2 strategy (``fsdp.py``).

The plugin keeps Accelerate's field names. Fields left unset keep stoker's defaults; set fields that FSDP2 shares
are translated (:meth:`FullyShardedDataParallelPlugin.to_strategy`), and set fields that have no FSDP2 meaning in
stoker raise a ``ValueError`` naming the field and what to do instead, rather than being ignored.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch

_RESHARD = {"FULL_SHARD": True, "1": True, "SHARD_GRAD_OP": False, "2": False}
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
           "fp32": torch.float32, "float32": torch.float32, "no": None}
# Values that describe what FSDP2 does anyway: accepted without effect.
_SAME_AS_FSDP2 = {"use_orig_params": (True,), "limit_all_gathers": (True,), "backward_prefetch": ("BACKWARD_PRE",),
                  "state_dict_type": ("SHARDED_STATE_DICT",), "fsdp_version": (2,)}
_WHY_NOT = {
    "fsdp_version": "stoker runs FSDP2 (torch.distributed.fsdp.fully_shard) only; use fsdp_version=2",
    "state_dict_type": "save_state writes sharded checkpoints (torch.distributed.checkpoint); for full weights "
                       "use accelerator.save_model(model, folder) or get_state_dict(model)",
    "state_dict_config": "save_state writes sharded checkpoints; save_model writes the full weights",
    "optim_state_dict_config": "save_state writes sharded optimizer state",
    "use_orig_params": "FSDP2 always keeps the original parameters",
    "limit_all_gathers": "FSDP2 always limits all-gathers in flight",
    "backward_prefetch": "FSDP2 prefetches the next all-gather before each backward (BACKWARD_PRE) only",
    "forward_prefetch": "FSDP2 has no forward prefetch setting here",
    "param_init_fn": "build the model on the device (or on 'meta' and materialize it) before prepare",
    "sync_module_states": "every process must build the same weights: call set_seed() before building the model, "
                          "or load the weights after prepare",
    "activation_checkpointing": "apply torch.utils.checkpoint in the model's forward",
    "activation_checkpointing_offload": "apply torch.utils.checkpoint in the model's forward",
    "cpu_ram_efficient_loading": "load the weights after prepare (load_checkpoint_in_model)",
    "ignored_modules": "keep modules out of the model that prepare shards",
}


@dataclasses.dataclass
class FullyShardedDataParallelPlugin:
    """FSDP settings in Accelerate's names, for ``Accelerator(fsdp_plugin=...)``.

    Supported: ``reshard_after_forward`` (or ``sharding_strategy``: ``"FULL_SHARD"`` -> True, ``"SHARD_GRAD_OP"``
    -> False), ``auto_wrap_policy`` (``"transformer_based_wrap"`` with ``transformer_cls_names_to_wrap``,
    ``"size_based_wrap"`` with ``min_num_params``, ``"no_wrap"``, or a callable ``module -> bool``),
    ``mixed_precision_policy`` (an FSDP2 ``MixedPrecisionPolicy``, or a dict/str of dtypes), ``cpu_offload``.
    Every other field must stay unset (or at the value FSDP2 has anyway); see the module docstring.

    Example:
        >>> plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
        ...                                         transformer_cls_names_to_wrap=["Block"], cpu_offload=False)
        >>> accelerator = Accelerator(mixed_precision="bf16", fsdp_plugin=plugin)   # under torchrun
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: Any = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Any = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool | None = None
    use_orig_params: bool | None = None
    param_init_fn: Callable | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def __post_init__(self) -> None:
        self._check_unsupported()
        self._reshard()  # errors at construction, not at prepare
        self._policy()
        self._mixed_precision()

    def _check_unsupported(self) -> None:
        for name, why in _WHY_NOT.items():
            value = getattr(self, name)
            if value is None or value is False:
                continue
            if _name_of(value) in _SAME_AS_FSDP2.get(name, ()) or value in _SAME_AS_FSDP2.get(name, ()):
                continue
            raise ValueError(f"FullyShardedDataParallelPlugin({name}={value!r}) is not supported by stoker's FSDP2 "
                             f"strategy: {why}. Leave {name} unset.")

    def _reshard(self) -> bool | None:
        given = [(n, getattr(self, n)) for n in ("reshard_after_forward", "sharding_strategy")
                 if getattr(self, n) is not None]
        if not given:
            return None
        name, value = given[0]
        if isinstance(value, bool):
            return value
        key = _name_of(value)
        if key not in _RESHARD:
            raise ValueError(
                f"FullyShardedDataParallelPlugin({name}={value!r}) is not supported: FSDP2 shards fully and either "
                "reshards after forward ('FULL_SHARD', True) or keeps the gathered parameters until backward "
                "('SHARD_GRAD_OP', False). NO_SHARD is plain DDP (strategy='ddp'); hybrid sharding is not offered."
            )
        return _RESHARD[key]

    def _policy(self) -> Any:
        policy = self.auto_wrap_policy
        if policy is None:
            policy = ("transformer_based_wrap" if self.transformer_cls_names_to_wrap
                      else "size_based_wrap" if self.min_num_params else None)
        if policy is None:
            return None
        if callable(policy):
            params = [p for p in inspect.signature(policy).parameters.values()
                      if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if len(params) != 1:
                raise ValueError(
                    "FullyShardedDataParallelPlugin(auto_wrap_policy=<callable>) must take one module and return "
                    "whether to shard it separately (FSDP1 policies taking (module, recurse, nonwrapped_numel) do "
                    "not apply to FSDP2). Or use 'transformer_based_wrap' with transformer_cls_names_to_wrap."
                )
            return policy
        key = str(getattr(policy, "value", policy)).lower()
        if key == "transformer_based_wrap":
            if not self.transformer_cls_names_to_wrap:
                raise ValueError("FullyShardedDataParallelPlugin(auto_wrap_policy='transformer_based_wrap') needs "
                                 "transformer_cls_names_to_wrap=[...]: the block class names, e.g. ['Block'].")
            return set(self.transformer_cls_names_to_wrap)
        if key == "size_based_wrap":
            return _AtLeast(int(self.min_num_params or 100_000_000))
        if key == "no_wrap":
            return _never
        raise ValueError(f"FullyShardedDataParallelPlugin(auto_wrap_policy={policy!r}) is not a policy. Expected "
                         "'transformer_based_wrap', 'size_based_wrap', 'no_wrap' or a callable module -> bool.")

    def _mixed_precision(self) -> Any:
        policy = self.mixed_precision_policy
        if policy is None or type(policy).__name__ == "MixedPrecisionPolicy":
            return policy
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if isinstance(policy, str):
            policy = {"param_dtype": policy, "reduce_dtype": policy}
        if not isinstance(policy, dict):
            raise TypeError(f"FullyShardedDataParallelPlugin(mixed_precision_policy={policy!r}) must be a "
                            "torch.distributed.fsdp.MixedPrecisionPolicy, a dict of dtypes or a dtype name.")
        allowed = {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"}
        unknown = sorted(set(policy) - allowed)
        if unknown:
            raise ValueError(f"FullyShardedDataParallelPlugin(mixed_precision_policy=...) has {unknown}, which FSDP2's "
                             f"MixedPrecisionPolicy does not take (buffers keep their dtype). Allowed: {sorted(allowed)}.")
        return MixedPrecisionPolicy(**{k: _dtype(v) if k.endswith("dtype") else v for k, v in policy.items()})

    def to_strategy(self, group_options: dict[str, Any] | None = None) -> Any:
        """The ``FSDPStrategy`` these settings describe (not yet connected to the process group)."""
        from ...accelerator.distributed.fsdp import FSDPStrategy

        kwargs: dict[str, Any] = dict(group_options or {})
        if self.cpu_offload is not None and self.cpu_offload is not False:
            offload = getattr(self.cpu_offload, "offload_params", True)  # FSDP1's CPUOffload(offload_params=...)
            if offload:
                from torch.distributed.fsdp import CPUOffloadPolicy

                kwargs["offload_policy"] = (self.cpu_offload if type(self.cpu_offload).__name__ == "CPUOffloadPolicy"
                                            else CPUOffloadPolicy())
        return FSDPStrategy(auto_wrap_policy=self._policy(), mixed_precision=self._mixed_precision(),
                            reshard_after_forward=self._reshard(), **kwargs)


class _AtLeast:
    """``size_based_wrap``: modules with at least ``threshold`` parameters (counting their submodules')."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def __call__(self, module: torch.nn.Module) -> bool:
        return sum(p.numel() for p in module.parameters()) >= self.threshold


def _never(module: torch.nn.Module) -> bool:
    """``no_wrap``: only the root is sharded."""
    return False


def _name_of(value: Any) -> Any:
    """``"FULL_SHARD"`` for ``ShardingStrategy.FULL_SHARD``, ``"FULL_SHARD"``, ``"full_shard"`` or ``1``."""
    if isinstance(value, bool):
        return value
    name = getattr(value, "name", None)
    if name is not None:
        return name
    return str(value).upper() if isinstance(value, (str, int)) else value


def _dtype(value: Any) -> Any:
    if value is None or isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value.lower() in _DTYPES:
        return _DTYPES[value.lower()]
    raise ValueError(f"FullyShardedDataParallelPlugin(mixed_precision_policy=...): {value!r} is not a dtype. "
                     f"Expected a torch.dtype or one of {sorted(_DTYPES)}.")
