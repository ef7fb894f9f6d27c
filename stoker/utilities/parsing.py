"""``pytorch_lightning.utilities.parsing``'s names: ``AttributeDict`` (``hparams``' type), ``is_picklable`` and
``clean_namespace``, and ``lightning_hasattr`` / ``lightning_getattr`` / ``lightning_setattr``, which find a value
where the tuner looks for ``lr`` or ``batch_size`` (`stoker.tuner.trial.attribute_holders`: the module, its
``hparams``, the data module of its Trainer, that one's ``hparams``; the last found is the value in force)."""

from __future__ import annotations

import pickle
from typing import Any

from stoker.trainer.hparams import AttributeDict


def is_picklable(obj: Any) -> bool:
    """Whether ``pickle.dumps(obj)`` works (a lambda or an open file does not).

    Example:
        >>> is_picklable({"lr": 0.1}), is_picklable(lambda x: x)
        (True, False)
    """
    try:
        pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError, RuntimeError):  # RuntimeError: a ScriptModule
        return False
    return True


def clean_namespace(hparams: Any) -> None:
    """Removes, in place, the entries of a dict (or the attributes of a namespace) that cannot be pickled."""
    entries = hparams if isinstance(hparams, dict) else vars(hparams)
    for name in [name for name, value in entries.items() if not is_picklable(value)]:
        del entries[name]


def _holders(model: Any, attribute: str) -> list[Any]:
    from stoker.tuner.trial import attribute_holders  # the tuner is loaded when these are used

    try:
        trainer = model.trainer
    except RuntimeError:  # not attached to a Trainer: no data module to look in
        trainer = None
    return attribute_holders(model, getattr(trainer, "datamodule", None), attribute)


def _missing(attribute: str) -> AttributeError:
    return AttributeError(f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict, nor "
                          "the datamodule.")


def lightning_hasattr(model: Any, attribute: str) -> bool:
    """Whether ``attribute`` is on ``model``, in its ``hparams``, or on (or in the ``hparams`` of) its data module."""
    return bool(_holders(model, attribute))


def lightning_getattr(model: Any, attribute: str) -> Any:
    """The value of ``attribute`` where :func:`lightning_hasattr` finds it (the data module's when both have it).

    Raises:
        AttributeError: none of them has it.
    """
    holders = _holders(model, attribute)
    if not holders:
        raise _missing(attribute)
    holder = holders[-1]
    return holder[attribute] if isinstance(holder, dict) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Sets ``attribute`` to ``value`` everywhere :func:`lightning_hasattr` finds it.

    Raises:
        AttributeError: none of them has it.
    """
    from stoker.tuner.trial import set_attribute

    holders = _holders(model, attribute)
    if not holders:
        raise _missing(attribute)
    set_attribute(holders, attribute, value)


__all__ = ["AttributeDict", "clean_namespace", "is_picklable", "lightning_getattr", "lightning_hasattr",
           "lightning_setattr"]
