"""Lightning's ``core.saving`` helpers for a run's ``hparams.yaml``: ``load_hparams_from_yaml`` and
``save_hparams_to_yaml``, on the files stoker's loggers write (``stoker.loggers.hparams_yaml``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["load_hparams_from_yaml", "save_hparams_to_yaml"]


def load_hparams_from_yaml(config_yaml: str | os.PathLike, use_omegaconf: bool = True) -> dict[str, Any]:
    """The hyperparameters in a YAML file (a logger's ``hparams.yaml``); ``{}`` with a warning when the file is
    missing, as in Lightning. ``use_omegaconf`` is accepted and ignored: a plain dict comes back."""
    import yaml

    if not os.path.isfile(config_yaml):
        warnings.warn(f"No hyperparameter file at {os.fspath(config_yaml)!r}.", RuntimeWarning, stacklevel=2)
        return {}
    with open(config_yaml, encoding="utf-8") as f:
        hparams = yaml.safe_load(f)
    if hparams is not None and not isinstance(hparams, dict):
        raise ValueError(f"{os.fspath(config_yaml)} holds a {type(hparams).__name__}, not a mapping of names.")
    return hparams or {}


def save_hparams_to_yaml(config_yaml: str | os.PathLike, hparams: Mapping[str, Any] | Any,
                         use_omegaconf: bool = True) -> None:
    """``hparams`` (a mapping or an ``argparse.Namespace``) written to ``config_yaml`` as the loggers write it, except
    that an entry holding an object YAML can only write as text (a dtype, a function; paths and enums are fine) is
    left out with a warning, as in Lightning: read back, it would be a string where the object was expected."""
    from ...loggers.hparams_yaml import yaml_text

    values = vars(hparams) if not isinstance(hparams, Mapping) and hasattr(hparams, "__dict__") else hparams
    if not isinstance(values, Mapping):
        raise TypeError(f"save_hparams_to_yaml needs a mapping or a Namespace, got {type(hparams).__name__}.")
    kept = {}
    for key, value in values.items():
        if _holds_an_object(value):
            warnings.warn(f"Skipping {key!r} parameter: {value!r} has no YAML form that reads back as itself, so "
                          f"{os.fspath(config_yaml)} leaves it out.", UserWarning, stacklevel=2)
        else:
            kept[key] = value
    with open(config_yaml, "w", encoding="utf-8") as f:
        f.write(yaml_text(kept))


def _holds_an_object(value: Any) -> bool:
    """Whether ``value`` holds something that YAML would get as its text only (not a path: its text is the path)."""
    if isinstance(value, Mapping):
        return any(_holds_an_object(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_an_object(v) for v in value)
    return not isinstance(value, (type(None), bool, int, float, str, Enum, os.PathLike))
