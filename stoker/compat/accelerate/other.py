"""The rest of ``accelerate.utils`` that training scripts import: seeding, unwrapping, saving, a progress bar."""

from __future__ import annotations

import enum
import os
from typing import Any

import torch

from ...accelerator import check_seed
from . import tools
from ...accelerator.operations import set_seed as _set_seed


class LoggerType(str, enum.Enum):
    """Tracker names for ``Accelerator(log_with=...)`` (Accelerate's values; see the README for those stoker has)."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"
    CSV = "csv"

    def __str__(self) -> str:
        return self.value


def process_ranks() -> tuple[int, int]:
    """(process index, local process index) from the default group or the launcher's environment."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    return int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seeds Python, NumPy and torch (Accelerate's signature).

    Args:
        seed: The seed.
        device_specific: Add the process index, so that each process draws different numbers.
        deterministic: Also ask torch for deterministic algorithms.

    Example:
        >>> set_seed(42, device_specific=True)  # process i is seeded with 42 + i
    """
    check_seed(seed, example="set_seed(42)")
    _set_seed(seed + (process_ranks()[0] if device_specific else 0), deterministic=deterministic)


def is_compiled_module(module: Any) -> bool:
    """True for the result of ``torch.compile(module)``."""
    return isinstance(module, torch.nn.Module) and hasattr(module, "_orig_mod")


def extract_model_from_parallel(model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                                keep_torch_compile: bool = True, recursive: bool = False) -> torch.nn.Module:
    """The user's module inside DDP/``DataParallel`` wrappers (and ``torch.compile`` unless
    ``keep_torch_compile``); ``keep_fp32_wrapper=False`` also removes stoker's autocast forward.

    With ``keep_torch_compile`` a model compiled around the user's module is returned as it is; one compiled around
    a DDP wrapper is unwrapped entirely (recompiling would cost a compilation). FSDP2 modules are the user's
    modules already. ``recursive`` is accepted for Accelerate compatibility (nested wrappers are always removed).
    """
    from ...accelerator.step.precision import unwrap_forward

    parallel = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    if keep_torch_compile and is_compiled_module(model) and not isinstance(model._orig_mod, parallel):
        return model  # compiled around the user's module: nothing to remove
    while True:
        if is_compiled_module(model):
            model = model._orig_mod
        elif isinstance(model, parallel):
            model = model.module
        else:
            break
    if not keep_fp32_wrapper:
        unwrap_forward(model)
    return model


def save(obj: Any, f: Any, save_on_each_node: bool = False, safe_serialization: bool = False) -> None:
    """Saves ``obj`` to ``f`` on the main process (the local main process of each machine with
    ``save_on_each_node``); a path is written atomically. See ``Accelerator.save``."""
    rank, local = process_ranks()
    tools.save(obj, f, write=(local if save_on_each_node else rank) == 0, safe_serialization=safe_serialization)


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm``, shown on the local main process only (disabled elsewhere) unless
    ``main_process_only=False``."""
    from tqdm.auto import tqdm as _tqdm

    if main_process_only and process_ranks()[1] != 0:
        kwargs["disable"] = True
    return _tqdm(*args, **kwargs)
