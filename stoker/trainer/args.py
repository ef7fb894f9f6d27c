"""Validation of ``Trainer(...)`` arguments: once, where they enter, with messages that say how to fix them."""

from __future__ import annotations

import math
from typing import Any


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def optional_int(name: str, value: Any, minimum: int, none_aliases: tuple = ()) -> int | None:
    """``value`` as an int >= ``minimum``, or None (also for any of ``none_aliases``, e.g. Lightning's -1)."""
    if value is None or (none_aliases and _is_int(value) and value in none_aliases):
        return None
    if not _is_int(value) or value < minimum:
        alias = f" (or {', '.join(map(str, none_aliases))})" if none_aliases else ""
        raise ValueError(f"Trainer({name}={value!r}) must be None{alias} or an int >= {minimum}.")
    return value


def positive_int(name: str, value: Any, hint: str = "") -> int:
    if not _is_int(value) or value < 1:
        raise ValueError(f"Trainer({name}={value!r}) must be an int >= 1.{hint}")
    return value


def clip_value(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise ValueError(f"Trainer({name}={value!r}) must be None (no clipping) or a finite number > 0.")
    return float(value)


def batch_limit(name: str, value: Any) -> int | float | None:
    """None (all batches), an int count >= 0, or a fraction in [0, 1] (1.0 means all)."""
    if value is None:
        return None
    if _is_int(value):
        if value < 0:
            raise ValueError(f"Trainer({name}={value!r}) must be >= 0: a number of batches, or a fraction in [0, 1].")
        return value
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return None if value == 1.0 else value
    raise ValueError(f"Trainer({name}={value!r}) must be None (all batches), an int number of batches, or a float "
                     "fraction of the loader in [0.0, 1.0].")


def resolve_limit(name: str, limit: int | float | None, length: int | None) -> int | None:
    """The number of batches to run per epoch for a loader of ``length`` (None: all, length unknown or not)."""
    if limit is None:
        return None
    if isinstance(limit, float):
        if length is None:
            raise ValueError(f"Trainer({name}={limit!r}) is a fraction, but the loader has no length (an iterable "
                             "dataset). Give an int number of batches instead.")
        return int(length * limit)
    return limit


def val_check_interval(value: Any) -> int | float:
    if _is_int(value) and value >= 1:
        return value
    if isinstance(value, float) and 0.0 < value <= 1.0:
        return value
    raise ValueError(f"Trainer(val_check_interval={value!r}) must be a float in (0.0, 1.0] (a fraction of the "
                     "training epoch) or an int >= 1 (every that many training batches).")


def accelerator_choice(value: Any) -> bool:
    """Returns ``cpu`` (force CPU) for ``Trainer(accelerator=...)``."""
    import torch

    choices = ("auto", "cpu", "gpu", "cuda", "mps")
    key = value.lower() if isinstance(value, str) else None
    if key not in choices:
        raise ValueError(f"Trainer(accelerator={value!r}) is not an accelerator. Expected one of: "
                         + ", ".join(repr(c) for c in choices) + ".")
    if key in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(f"Trainer(accelerator={value!r}) but torch sees no CUDA device. Use accelerator='auto' or "
                         "'cpu', or install a CUDA build of torch.")
    if key == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("Trainer(accelerator='mps') but MPS is not available here. Use 'auto' or 'cpu'.")
    return key == "cpu"


def seed_value(value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"Trainer(seed={value!r}) must be None or an int.")
    return value
