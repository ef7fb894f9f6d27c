"""Settings a launcher passes to the Accelerator through the environment (``stoker launch``, ``accelerate launch``).

``stoker launch --mixed_precision bf16 --gradient_accumulation_steps 4 --cpu`` sets ``STOKER_MIXED_PRECISION``,
``STOKER_GRADIENT_ACCUMULATION_STEPS`` and ``STOKER_USE_CPU``, and Accelerate's names for the same settings
(``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``, ``ACCELERATE_USE_CPU``), so a script
behaves the same under either launcher. An Accelerator built without those arguments takes them from here; an
argument passed to the constructor always wins (``cpu=True`` or the variable: either forces the CPU).
"""

from __future__ import annotations

import os

from ...accelerator.arguments import InvalidArgumentError, check_accumulation_steps
from ...accelerator.step.precision import parse_precision

__all__ = ["ACCUMULATION_VARS", "CPU_VARS", "PRECISION_VARS", "settings_from_environment"]

# First set wins: stoker's own name, then Accelerate's.
PRECISION_VARS = ("STOKER_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION")
ACCUMULATION_VARS = ("STOKER_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
CPU_VARS = ("STOKER_USE_CPU", "ACCELERATE_USE_CPU")
_TRUE = {"1", "true", "yes", "y", "on", "t"}


def settings_from_environment(mixed_precision: str | None, gradient_accumulation_steps: int | None,
                              cpu: bool) -> tuple[str, int, bool]:
    """``(mixed_precision, gradient_accumulation_steps, cpu)`` with the launcher's values where none was passed.

    Example:
        >>> os.environ["STOKER_MIXED_PRECISION"] = "bf16"
        >>> settings_from_environment(None, None, False)
        ('bf16', 1, False)
        >>> settings_from_environment("no", 2, False)  # explicit arguments win
        ('no', 2, False)
        >>> del os.environ["STOKER_MIXED_PRECISION"]

    Raises:
        InvalidArgumentError: the accumulation variable is not a positive integer (a ``ValueError``).
        ValueError: the precision variable is not a precision (``parse_precision``'s error, naming the variable).
    """
    if mixed_precision is None:
        name, value = _first(PRECISION_VARS)
        # Checked here, so that a bad value names the variable it came from rather than Accelerator(...).
        mixed_precision = parse_precision(value.strip(), argument=f"{name}=...") if value else "no"
    if gradient_accumulation_steps is None:
        name, value = _first(ACCUMULATION_VARS)
        gradient_accumulation_steps = 1
        if value:
            try:
                gradient_accumulation_steps = int(value)
            except ValueError:
                raise InvalidArgumentError(
                    f"{name}={value!r} is not a number of micro-batches. Set it to a positive integer such as 4 "
                    "(or pass Accelerator(gradient_accumulation_steps=...))."
                ) from None
            check_accumulation_steps(gradient_accumulation_steps, argument=f"{name}=...")
    if not cpu:
        cpu = any(os.environ.get(var, "").strip().lower() in _TRUE for var in CPU_VARS)
    return mixed_precision, gradient_accumulation_steps, cpu


def _first(names: tuple[str, ...]) -> tuple[str, str]:
    for name in names:
        value = os.environ.get(name)
        if value:
            return name, value
    return names[0], ""
