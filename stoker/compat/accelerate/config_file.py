"""Reading an Accelerate config file (what ``accelerate config`` writes) for ``stoker launch --config_file``.

It owns which keys of that file stoker shares and what each becomes: a launch setting with the same name as the
``stoker launch`` flag. Keys that would change the run in a way stoker's launcher does not do (DeepSpeed, TPU,
Megatron-LM, SageMaker) are errors; FSDP and the other keys that configure Accelerate's own plugins are reported as
ignored, since in stoker the script chooses them (``Accelerator(strategy="fsdp")``, ``dynamo_backend=``).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["SHARED_KEYS", "read_accelerate_config"]

# Config key -> launch flag (the same names, except use_cpu -> cpu).
SHARED_KEYS = {
    "num_processes": "num_processes", "num_machines": "num_machines", "machine_rank": "machine_rank",
    "main_process_ip": "main_process_ip", "main_process_port": "main_process_port",
    "mixed_precision": "mixed_precision", "gradient_accumulation_steps": "gradient_accumulation_steps",
    "use_cpu": "cpu", "gpu_ids": "gpu_ids", "rdzv_backend": "rdzv_backend", "same_network": "same_network",
    "max_restarts": "max_restarts", "monitor_interval": "monitor_interval",
    "num_cpu_threads_per_process": "num_cpu_threads_per_process",
}
# Keys with no effect on a local torchrun launch (descriptive, or for other launchers' defaults).
_HARMLESS = {"compute_environment", "distributed_type", "debug", "main_training_function", "downcast_bf16",
             "enable_cpu_affinity", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "commands", "command_file",
             "tpu_name", "tpu_zone", "dynamo_backend"}
_UNSUPPORTED_TYPES = {
    "DEEPSPEED": "DeepSpeed is not supported; use FSDP (Accelerator(strategy='fsdp'))",
    "XLA": "TPUs are not supported", "TPU": "TPUs are not supported",
    "MEGATRON_LM": "Megatron-LM is not supported",
}


def read_accelerate_config(path: str | os.PathLike) -> tuple[dict[str, Any], list[str]]:
    """The launch settings an Accelerate config file holds, and the keys that were ignored (to tell the user).

    Returns:
        ``(settings, ignored)``: settings keyed by ``stoker launch`` flag name (``{"num_processes": 2, "cpu":
        True, ...}``) and the names of keys with a setting that stoker's launcher does not apply.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a YAML/JSON mapping, or asks for something stoker cannot launch.
    """
    import yaml  # lazy: only a launch with --config_file parses YAML (JSON files parse as YAML too)

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"stoker launch --config_file {path!r}: no such file. Pass the YAML file that "
                                "`accelerate config` wrote (by default ~/.cache/huggingface/accelerate/default_config.yaml).")
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as error:
            raise ValueError(f"stoker launch --config_file {path!r} is not valid YAML: {error}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"stoker launch --config_file {path!r} holds a {type(data).__name__}; expected a mapping "
                         "of Accelerate config keys such as 'num_processes: 2'.")
    _check_supported(path, data)
    settings = {flag: data[key] for key, flag in SHARED_KEYS.items() if data.get(key) is not None}
    if str(data.get("distributed_type", "")).upper() == "MULTI_CPU":
        settings["cpu"] = True  # Accelerate runs MULTI_CPU on the CPU whatever use_cpu says
    if settings.get("gpu_ids") == "all":
        del settings["gpu_ids"]
    ignored = sorted(key for key, value in data.items()
                     if key not in SHARED_KEYS and key not in _HARMLESS and _is_set(value))
    if str(data.get("distributed_type", "")).upper() == "FSDP":
        ignored.insert(0, "distributed_type: FSDP")
    return settings, ignored


def _check_supported(path: str, data: dict[str, Any]) -> None:
    kind = str(data.get("distributed_type", "NO")).upper()
    if kind in _UNSUPPORTED_TYPES:
        raise ValueError(f"stoker launch --config_file {path!r} has distributed_type: {kind}. "
                         f"{_UNSUPPORTED_TYPES[kind]}: change it to MULTI_GPU, MULTI_CPU or NO.")
    environment = str(data.get("compute_environment", "LOCAL_MACHINE")).upper()
    if environment != "LOCAL_MACHINE":
        raise ValueError(f"stoker launch --config_file {path!r} has compute_environment: {environment}; stoker "
                         "launches on this machine (and others through --num_machines) only: use LOCAL_MACHINE.")


def _is_set(value: Any) -> bool:
    """Whether a config value asks for something (empty sections, ``NO``, ``false`` and ``null`` do not)."""
    if isinstance(value, dict):
        return any(_is_set(v) for k, v in value.items() if not str(k).endswith("_version"))
    return value not in (None, False, "", "no", "NO", [], 0)
