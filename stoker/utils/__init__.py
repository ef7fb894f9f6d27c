"""``accelerate.utils``'s names that training scripts import, under the same names: ``from stoker.utils import X``.

Imported lazily, name by name, so that ``import stoker.utils`` costs nothing until a name is used.

Example:
    >>> from stoker.utils import DistributedDataParallelKwargs, find_executable_batch_size, gather_object, set_seed
"""

from importlib import import_module
from typing import Any

_ENGINE = "stoker.accelerator"
_LAZY = {
    # configuration objects
    "DistributedDataParallelKwargs": f"{_ENGINE}.kwargs",
    "DDPCommunicationHookType": f"{_ENGINE}.kwargs",
    "GradScalerKwargs": f"{_ENGINE}.kwargs",
    "InitProcessGroupKwargs": f"{_ENGINE}.kwargs",
    "AutocastKwargs": f"{_ENGINE}.kwargs",
    "ProfileKwargs": f"{_ENGINE}.kwargs",
    "KwargsHandler": f"{_ENGINE}.kwargs",
    "GradientAccumulationPlugin": f"{_ENGINE}.kwargs",
    "TorchDynamoPlugin": f"{_ENGINE}.kwargs",
    "DynamoBackend": f"{_ENGINE}.kwargs",
    "DeepSpeedPlugin": f"{_ENGINE}.kwargs",
    "FullyShardedDataParallelPlugin": f"{_ENGINE}.fsdp_plugin",
    "ProjectConfiguration": f"{_ENGINE}.config",
    "DataLoaderConfiguration": f"{_ENGINE}.config",
    "DistributedType": f"{_ENGINE}.state",
    "LoggerType": "stoker.utils.other",
    # operations
    "send_to_device": "stoker.utils.operations",
    "gather": "stoker.utils.operations",
    "gather_object": "stoker.utils.operations",
    "broadcast": "stoker.utils.operations",
    "broadcast_object_list": "stoker.utils.operations",
    "reduce": "stoker.utils.operations",
    "pad_across_processes": "stoker.utils.operations",
    "wait_for_everyone": "stoker.utils.operations",
    "synchronize_rng_states": "stoker.utils.operations",
    # memory
    "find_executable_batch_size": "stoker.utils.memory",
    "release_memory": "stoker.utils.memory",
    "should_reduce_batch_size": "stoker.utils.memory",
    "clear_device_cache": "stoker.utils.memory",
    # other
    "set_seed": "stoker.utils.other",
    "save": "stoker.utils.other",
    "tqdm": "stoker.utils.other",
    "extract_model_from_parallel": "stoker.utils.other",
    "is_compiled_module": "stoker.utils.other",
    "load_checkpoint_in_model": _ENGINE,
    "get_logger": "stoker.utils.logging",
    "LocalSGD": f"{_ENGINE}.local_sgd",
    # availability checks that scripts branch on
    **{name: "stoker.utils.available" for name in (
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
