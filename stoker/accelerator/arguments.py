"""Checks of the arguments that enter stoker in more than one place, written once.

An argument such as the accumulation window's length reaches the engine through ``Accelerator(...)``, the
``accelerator.gradient_accumulation_steps`` setter, ``Trainer(accumulate=...)`` (and Lightning's
``accumulate_grad_batches``), ``stoker launch --gradient_accumulation_steps`` and the launcher's environment
variables. Each of those entry points calls the one validator here, so the same bad value gets the same exception
type and the same message everywhere; only the name of the entry point in the message differs (``argument``, with
``...`` standing for the value, as in :func:`~stoker.accelerator.parse_precision`).

Owns: what a valid value is and the error for an invalid one. Does not own: defaults, or reading the value from the
environment (``environment.py``) or the command line (``stoker/cli``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["InvalidArgumentError", "InvalidArgumentType", "InvalidArgumentValue", "check_accumulation_steps",
           "check_seed"]


class InvalidArgumentError(Exception):
    """A bad argument, refused by one of the checks here: catch this to catch both kinds below.

    Example:
        >>> try:
        ...     check_accumulation_steps(0, argument="Trainer(accumulate=...)")
        ... except ValueError as error:
        ...     print(str(error).split(":")[0])
        Trainer(accumulate=0) must be an int >= 1
    """


class InvalidArgumentType(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a float, a str, a bool where an int is needed)."""


class InvalidArgumentValue(InvalidArgumentError, ValueError):
    """An argument of the right kind with a value out of range (0 or 1.5 micro-batches)."""


def _refuse(value: Any, message: str) -> InvalidArgumentError:
    """The error for a bad count: ``ValueError`` for a number no count can be (0, -2, 1.5); ``TypeError`` for a
    count given as another type (2.0, "2", True: the value would do, its type does not)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    impossible = number and (value < 1 or value != int(value))
    return InvalidArgumentValue(message) if impossible else InvalidArgumentType(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _got(value: Any) -> str:
    """What the bad value is, in words: ``"a float"``, ``"0"``."""
    return repr(value) if _is_int(value) else f"a {type(value).__name__}"


def check_accumulation_steps(value: Any, *, argument: str = "Accelerator(gradient_accumulation_steps=...)") -> int:
    """``value`` as the accumulation window's length: an int >= 1 (a bool is not one).

    Args:
        value: The number of micro-batches per optimizer step.
        argument: Where it came from, with ``...`` for the value, e.g. ``"Trainer(accumulate=...)"`` or
            ``"stoker launch --gradient_accumulation_steps ..."``; the message quotes it with the bad value and
            again with 4 as the example of a correct call.

    Raises:
        InvalidArgumentType: ``value`` is a whole number >= 1 of another type than int (a ``TypeError``).
        InvalidArgumentValue: ``value`` is below 1 or not whole (a ``ValueError``).

    Example:
        >>> check_accumulation_steps(4)
        4
    """
    if _is_int(value) and value >= 1:
        return value
    raise _refuse(
        value,
        f"{argument.replace('...', repr(value))} must be an int >= 1: got {_got(value)}, expected an integer >= 1 "
        "(the number of micro-batches per optimizer step; 1 means no accumulation). Pass e.g. "
        f"{argument.replace('...', '4')} to update the weights every 4 micro-batches."
    )


def check_seed(value: Any, *, argument: str = "set_seed(seed=...)", allow_none: bool = False,
               example: str | None = None) -> int | None:
    """``value`` as a random seed: an int (a bool is not one), or None where ``allow_none``.

    Args:
        value: The seed.
        argument: Where it came from, with ``...`` for the value (see :func:`check_accumulation_steps`).
        allow_none: None is accepted (and returned): "do not seed".
        example: A correct call to quote (default: ``argument`` with 42).

    Raises:
        InvalidArgumentType: ``value`` is not an int (nor None where that is allowed).

    Example:
        >>> check_seed(None, argument="Trainer(seed=...)", allow_none=True) is None
        True
    """
    if _is_int(value) or (value is None and allow_none):
        return value
    rule = "must be None or an int" if allow_none else "needs an int"
    raise InvalidArgumentType(
        f"{argument.replace('...', repr(value))} {rule}: got {_got(value)}, expected an integer such as 42. Pass "
        f"e.g. {example or argument.replace('...', '42')}."
    )
