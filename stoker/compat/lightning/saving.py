"""Lightning's ``core.saving`` helpers for a run's ``hparams.yaml``: ``load_hparams_from_yaml`` and
``save_hparams_to_yaml``, on the files stoker's loggers write (``stoker.loggers.hparams_yaml``); and the older
``meta_tags.csv`` form, ``save_hparams_to_tags_csv`` / ``load_hparams_from_tags_csv``."""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["load_hparams_from_tags_csv", "load_hparams_from_yaml", "save_hparams_to_tags_csv", "save_hparams_to_yaml"]


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

    values = _mapping_of(hparams, "save_hparams_to_yaml")
    kept = {}
    for key, value in values.items():
        if _holds_an_object(value):
            warnings.warn(f"Skipping {key!r} parameter: {value!r} has no YAML form that reads back as itself, so "
                          f"{os.fspath(config_yaml)} leaves it out.", UserWarning, stacklevel=2)
        else:
            kept[key] = value
    with open(config_yaml, "w", encoding="utf-8") as f:
        f.write(yaml_text(kept))


def _mapping_of(hparams: Any, caller: str) -> Mapping[str, Any]:
    """``hparams`` as a mapping: itself, or an object's attributes (an ``argparse.Namespace``)."""
    values = vars(hparams) if not isinstance(hparams, Mapping) and hasattr(hparams, "__dict__") else hparams
    if not isinstance(values, Mapping):
        raise TypeError(f"{caller} needs a mapping or a Namespace, got {type(hparams).__name__}.")
    return values


def _holds_an_object(value: Any) -> bool:
    """Whether ``value`` holds something that YAML would get as its text only (not a path: its text is the path)."""
    if isinstance(value, Mapping):
        return any(_holds_an_object(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_an_object(v) for v in value)
    return not isinstance(value, (type(None), bool, int, float, str, Enum, os.PathLike))


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike, hparams: Mapping[str, Any] | Any) -> None:
    """``hparams`` (a mapping or an ``argparse.Namespace``) as Lightning's legacy ``meta_tags.csv``: a ``key,value``
    header, then one row per entry with the value's ``str``. The folder must exist."""
    folder = os.path.dirname(os.path.abspath(tags_csv))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"save_hparams_to_tags_csv({os.fspath(tags_csv)!r}): the folder {folder!r} does not "
                                "exist.")
    values = _mapping_of(hparams, "save_hparams_to_tags_csv")
    with open(tags_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["key", "value"])
        writer.writerows([key, value] for key, value in values.items())


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike) -> dict[str, Any]:
    """The hyperparameters of a ``meta_tags.csv``, read as ``load_from_checkpoint(hparams_file=...)`` reads one (each
    value as YAML: ``32``, ``0.008``, ``true``, ``[1, 2]``, else text); ``{}`` with a warning when the file is
    missing, as in Lightning."""
    from ...trainer.loading import read_hparams_file_for_loading

    if not os.path.isfile(tags_csv):
        warnings.warn(f"No hyperparameter file at {os.fspath(tags_csv)!r}.", RuntimeWarning, stacklevel=2)
        return {}
    return read_hparams_file_for_loading(tags_csv)
