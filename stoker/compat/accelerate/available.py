"""``is_*_available`` checks (Accelerate's names) that scripts branch on: devices, dtypes and optional packages.

Package checks look for the package without importing it.
"""

from __future__ import annotations

import importlib.util
import operator
import re

import torch


def _has(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def is_cuda_available() -> bool:
    return torch.cuda.is_available()


def is_mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def is_xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def is_npu_available() -> bool:
    """Ascend NPUs need the ``torch_npu`` extension, which stoker does not drive: False unless it is installed."""
    return _has("torch_npu")


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """bfloat16 autocast works here: on CPU always, on CUDA with a device that supports it."""
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else True


def is_fp16_available() -> bool:
    """float16 autocast with loss scaling: stoker runs it on CUDA and on CPU alike."""
    return True


def is_datasets_available() -> bool:
    return _has("datasets")


def is_transformers_available() -> bool:
    return _has("transformers")


def is_wandb_available() -> bool:
    return _has("wandb")


def is_mlflow_available() -> bool:
    return _has("mlflow")


def is_tensorboard_available() -> bool:
    return _has("tensorboard") or _has("tensorboardX")


def is_schedulefree_available() -> bool:
    return _has("schedulefree")


_OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
              "!=": operator.ne}


def is_torch_version(operation: str, version: str) -> bool:
    """Compares the installed torch with ``version``, e.g. ``is_torch_version(">=", "2.4")``."""
    if operation not in _OPERATORS:
        raise ValueError(f"is_torch_version({operation!r}, ...): expected one of {list(_OPERATORS)}.")
    return _OPERATORS[operation](_release(torch.__version__), _release(version))


def _release(version: str) -> tuple[int, ...]:
    """``(2, 13, 0)`` for ``"2.13.0+cpu"``, ``"2.13.0.dev20260101"`` or ``"2.13"`` (the numeric release only)."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    parts = [int(p) for p in match.group(0).split(".")] if match else []
    return tuple(parts + [0] * (3 - len(parts)))
