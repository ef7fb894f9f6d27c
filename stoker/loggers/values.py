"""How metric and hyperparameter values are normalised before a logger's backend sees them: scalars out of tensors,
hyperparameters as a flat or JSON-ready mapping, a metric's name with a logger's prefix.

It owns no logger and no file: every logger module calls these (``stoker.loggers.base`` re-exports them).
"""

from __future__ import annotations

import argparse
import dataclasses
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["Scalar", "flatten_params", "jsonable_params", "numbers_only", "params_to_dict", "prefixed", "to_scalars"]

Scalar = float | int


def prefixed(key: str, prefix: str) -> str:
    """A metric's name as a logger with ``prefix`` writes it: ``"{prefix}-{key}"`` (Lightning's separator)."""
    return f"{prefix}-{key}" if prefix else key


def to_scalars(metrics: Mapping[str, Any]) -> dict[str, Scalar]:
    """Convert metric values to Python numbers (one ``.item()`` per tensor).

    Raises:
        ValueError: A tensor value holds more than one element.
        TypeError: A value is not a number or a one-element tensor.
    """
    out: dict[str, Scalar] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"Metric {key!r} is a tensor of shape {tuple(value.shape)}; loggers take scalars. "
                    "Reduce it first (e.g. `.mean()`) or log its elements under separate names."
                )
            value = value.item()
        elif not isinstance(value, numbers.Number) and hasattr(value, "item"):
            value = value.item()  # NumPy scalars and 0-d arrays
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float)):
            if isinstance(value, numbers.Real):
                value = float(value)
            else:
                raise TypeError(
                    f"Metric {key!r} has value {value!r} of type {type(value).__name__}; "
                    "expected an int, a float or a one-element tensor."
                )
        out[str(key)] = value
    return out


def numbers_only(values: Mapping[str, Any], owner: str) -> dict[str, Scalar]:
    """The values that are numbers (or one-element tensors), as `to_scalars` makes them; the others (text, images,
    nested mappings) are left out with a warning that names them, as Accelerate's MLflow tracker leaves them out of
    ``tracker.log``. A tensor of several elements is still `to_scalars`' ``ValueError``."""
    kept: dict[str, Scalar] = {}
    dropped = []
    for key, value in values.items():
        try:
            kept.update(to_scalars({key: value}))
        except TypeError:
            dropped.append(str(key))
    if dropped:
        warnings.warn(f"{owner} logs numbers only; left out {dropped}. Log text and media with the TensorBoard or "
                      "W&B tracker (tracker.name == 'tensorboard' / 'wandb').", UserWarning, stacklevel=3)
    return kept


def params_to_dict(params: Mapping[str, Any] | argparse.Namespace | Any) -> dict[str, Any]:
    """Hyperparameters as a plain dict, from a mapping, a Namespace or a dataclass."""
    if isinstance(params, argparse.Namespace):
        return dict(vars(params))
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    if isinstance(params, Mapping):
        return dict(params)
    raise TypeError(
        f"log_hyperparams got {type(params).__name__}; "
        "expected a Mapping, an argparse.Namespace or a dataclass instance."
    )


def flatten_params(params: Mapping[str, Any], sep: str = "/") -> dict[str, bool | int | float | str]:
    """Flatten nested mappings with ``sep``; values that are not plain scalars become strings.

    Example: ``{"opt": {"lr": 0.1}, "layers": [2, 3]}`` -> ``{"opt/lr": 0.1, "layers": "[2, 3]"}``.
    """
    flat: dict[str, bool | int | float | str] = {}
    for key, value in params.items():
        key = str(key)
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping):
            for sub_key, sub_value in flatten_params(value, sep).items():
                flat[f"{key}{sep}{sub_key}"] = sub_value
        elif isinstance(value, torch.Tensor) and value.numel() == 1:
            flat[key] = value.item()
        elif isinstance(value, (bool, int, float, str)):
            flat[key] = value
        else:
            flat[key] = str(value)
    return flat


def jsonable_params(value: Any) -> Any:
    """Nested params with scalar tensors as numbers, Namespaces as dicts and str keys."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable_params(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):  # an OmegaConf ListConfig too
        return [jsonable_params(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value
