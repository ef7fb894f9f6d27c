"""``accelerate.utils``'s names that training scripts import, under the same names: ``from stoker.utils import X``.

A face over ``stoker.compat.accelerate`` (where the code is). Imported lazily, name by name, so that
``import stoker.utils`` costs nothing until a name is used.

Example:
    >>> from stoker.utils import DistributedDataParallelKwargs, find_executable_batch_size, gather_object, set_seed
"""

from importlib import import_module
from typing import Any

_ENGINE = "stoker.accelerator"
_COMPAT = "stoker.compat.accelerate"
_LAZY = {
    # configuration objects
    "DistributedDataParallelKwargs": f"{_COMPAT}.kwargs",
    "DDPCommunicationHookType": f"{_COMPAT}.kwargs",
    "GradScalerKwargs": f"{_COMPAT}.kwargs",
    "InitProcessGroupKwargs": f"{_COMPAT}.kwargs",
    "AutocastKwargs": f"{_COMPAT}.kwargs",
    "ProfileKwargs": f"{_COMPAT}.kwargs",
    "KwargsHandler": f"{_COMPAT}.kwargs",
    "GradientAccumulationPlugin": f"{_COMPAT}.kwargs",
    "TorchDynamoPlugin": f"{_COMPAT}.kwargs",
    "DynamoBackend": f"{_COMPAT}.kwargs",
    "DeepSpeedPlugin": f"{_COMPAT}.kwargs",
    "FullyShardedDataParallelPlugin": f"{_COMPAT}.fsdp_plugin",
    "ProjectConfiguration": f"{_ENGINE}.config",
    "DataLoaderConfiguration": f"{_ENGINE}.config",
    "DistributedType": f"{_COMPAT}.state",
    "LoggerType": f"{_COMPAT}.other",
    # operations
    "send_to_device": f"{_COMPAT}.operations",
    "gather": f"{_COMPAT}.operations",
    "gather_object": f"{_COMPAT}.operations",
    "broadcast": f"{_COMPAT}.operations",
    "broadcast_object_list": f"{_COMPAT}.operations",
    "reduce": f"{_COMPAT}.operations",
    "pad_across_processes": f"{_COMPAT}.operations",
    "wait_for_everyone": f"{_COMPAT}.operations",
    "synchronize_rng_states": f"{_COMPAT}.operations",
    # memory
    "find_executable_batch_size": f"{_COMPAT}.memory",
    "release_memory": f"{_COMPAT}.memory",
    "should_reduce_batch_size": f"{_COMPAT}.memory",
    "clear_device_cache": f"{_COMPAT}.memory",
    # other
    "set_seed": f"{_COMPAT}.other",
    "save": f"{_COMPAT}.other",
    "tqdm": f"{_COMPAT}.other",
    "extract_model_from_parallel": f"{_COMPAT}.other",
    "is_compiled_module": f"{_COMPAT}.other",
    "load_checkpoint_in_model": _ENGINE,
    "get_logger": f"{_COMPAT}.logging",
    "LocalSGD": f"{_COMPAT}.local_sgd",
    "patch_environment": f"{_COMPAT}.launchers",
    "PrepareForLaunch": f"{_COMPAT}.launchers",
    # availability checks that scripts branch on
    **{name: f"{_COMPAT}.available" for name in (
        "is_cuda_available", "is_mps_available", "is_xpu_available", "is_npu_available", "is_bf16_available",
        "is_fp16_available", "is_datasets_available", "is_transformers_available", "is_wandb_available",
        "is_mlflow_available", "is_tensorboard_available", "is_schedulefree_available", "is_torch_version")},
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker.utils' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
