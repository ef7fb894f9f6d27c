"""Validation of ``Trainer(...)`` arguments: once, where they enter, with messages that say how to fix them."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from ..accelerator import check_accumulation_steps, check_seed


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def optional_int(name: str, value: Any, minimum: int, none_aliases: tuple = (), lightning: str = "") -> int | None:
    """``value`` as an int >= ``minimum``, or None (also for any of ``none_aliases``, e.g. Lightning's -1). The error
    begins with ``lightning`` (Lightning's sentence for the same mistake, where it has one; ``{value}`` filled in)."""
    if value is None or (none_aliases and is_int(value) and value in none_aliases):
        return None
    if not is_int(value) or value < minimum:
        alias = f" (or {', '.join(map(str, none_aliases))})" if none_aliases else ""
        ours = f"Trainer({name}={value!r}) must be None{alias} or an int >= {minimum}."
        raise ValueError(f"{lightning.format(value=value)} ({ours})" if lightning else ours)
    return value


def positive_int(name: str, value: Any) -> int:
    if not is_int(value) or value < 1:
        raise ValueError(f"Trainer({name}={value!r}) must be an int >= 1.")
    return value


def accumulation_steps(name: str, value: Any) -> int:
    """``Trainer(accumulate=...)`` (or Lightning's ``accumulate_grad_batches``): the engine's one check of the
    window length, so the Trainer, the Accelerator and ``stoker launch`` refuse the same values alike."""
    return check_accumulation_steps(value, argument=f"Trainer({name}=...)")


def clip_value(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Trainer({name}={value!r}) must be None (no clipping) or a finite number > 0, not a "
                        f"{type(value).__name__}.")
    if not value > 0 or math.isinf(value):
        raise ValueError(f"Trainer({name}={value!r}) must be None (no clipping) or a finite number > 0.")
    return float(value)


def clip_algorithm(value: Any, argument: str = "Trainer(gradient_clip_algorithm=...)") -> str | None:
    """Lightning's ``gradient_clip_algorithm``: None (the default, "norm"), "norm" or "value" (any case), lowered.

    One check for both places it enters: ``Trainer(gradient_clip_algorithm=...)`` and the module's
    ``clip_gradients(..., gradient_clip_algorithm=...)`` (``argument`` names which, ``...`` standing for the value).
    """
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ("norm", "value"):
        return value.lower()
    raise ValueError(f"{argument.replace('...', repr(value))} must be 'norm' (the default: clip the gradients' total "
                     "norm) or 'value' (clamp each element).")


def batch_limit(name: str, value: Any) -> int | float | None:
    """None (all batches), an int count >= 0 (also written as a whole float: 1e4), or a fraction in [0, 1] (1.0
    means all)."""
    if value is None:
        return None
    if is_int(value):
        if value < 0:
            raise ValueError(f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int. "
                             f"(Trainer({name}={value!r}) must be >= 0: a number of batches, or a fraction in [0, 1].)")
        return value
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return None if value == 1.0 else value
    if isinstance(value, float) and value > 1.0 and value.is_integer():  # a count written as a float (1e4)
        return int(value)
    # (Lightning's sentence first, so that a test written for Lightning's error matches it)
    raise ValueError(f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int. "
                     f"(Trainer({name}={value!r}) must be None (all batches), an int number of batches, or a float "
                     "fraction of the loader in [0.0, 1.0].)")


def resolve_limit(name: str, limit: int | float | None, length: int | None) -> int | None:
    """The number of batches to run per epoch for a loader of ``length`` (None: all, length unknown or not)."""
    if limit is None:
        return None
    if isinstance(limit, float):
        if length is None:
            stage = name.removeprefix("limit_").removesuffix("_batches")
            raise ValueError(f"When using an `IterableDataset`, `Trainer({name})` must be `1.0` or an int. An int "
                             f"specifies `num_{stage}_batches` to use. (Trainer({name}={limit!r}) is a fraction, but "
                             "the loader has no length: give an int number of batches instead.)")
        return int(length * limit)
    return limit


def val_check_interval(value: Any) -> int | float | timedelta:
    if is_int(value) and value >= 1:
        return value
    if isinstance(value, float) and 0.0 < value <= 1.0:
        return value
    if isinstance(value, (str, dict, timedelta)):  # wall-clock time between validations
        from ..callbacks.timer import parse_duration

        try:
            duration = parse_duration(value)
        except (TypeError, ValueError) as error:
            raise ValueError(f"Trainer(val_check_interval={value!r}): {error}") from error
        if duration is not None and duration.total_seconds() > 0:
            return duration
    lightning = (f"You have passed invalid value {value} for val_check_interval, it has to be in [0.0, 1.0] or an "
                 "int. ") if isinstance(value, (int, float)) else ""  # Lightning's sentence for a number, first
    raise ValueError(f"{lightning}Trainer(val_check_interval={value!r}) must be a float in (0.0, 1.0] (a fraction of "
                     "the training epoch), an int >= 1 (every that many training batches), or a time > 0 between "
                     "validations (\"DD:HH:MM:SS\", a datetime.timedelta or a dict of timedelta's keywords).")


def training_off(limit: Any) -> bool:
    """``limit_train_batches=0`` (or ``0.0``): Lightning's switch that turns training off, so a fit runs its sanity
    check only. (A fraction that leaves no batch, or an empty loader, is an error instead.)"""
    return limit is not None and limit == 0


# Lightning's sentence for a check_val_every_n_epoch that is not an int ({value} filled in by optional_int)
EVERY_N_EPOCH_WORDS = "`check_val_every_n_epoch` should be an integer, found {value!r}."


def interval_across_epochs(interval: int | float | timedelta, every_n_epoch: int | None) -> None:
    """``check_val_every_n_epoch=None`` counts ``val_check_interval`` across epochs: a fraction of an epoch is
    refused (Lightning's sentence first)."""
    if every_n_epoch is None and not isinstance(interval, (int, timedelta)):
        raise ValueError("`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
                         "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`. "
                         "Trainer(check_val_every_n_epoch=None) counts val_check_interval across epochs, so it "
                         f"needs an int val_check_interval (batches); got {interval!r}.")


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
    """``Trainer(seed=...)``: None or an int (the engine's check, shared with ``set_seed``/``seed_everything``)."""
    return check_seed(value, argument="Trainer(seed=...)", allow_none=True)


def flag(name: str, value: Any, allow_none: bool = False) -> bool | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise TypeError(f"Trainer({name}={value!r}) must be True or False{' or None' if allow_none else ''}.")
    return value
