"""Lightning's ``core.saving`` helpers for a run's ``hparams.yaml``: ``load_hparams_from_yaml`` and
``save_hparams_to_yaml``, on the files stoker's loggers write (``stoker.loggers.hparams_yaml``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
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
    """``hparams`` (a mapping or an ``argparse.Namespace``) written to ``config_yaml`` as the loggers write it."""
    from ...loggers.hparams_yaml import yaml_text

    values = vars(hparams) if not isinstance(hparams, Mapping) and hasattr(hparams, "__dict__") else hparams
    if not isinstance(values, Mapping):
        raise TypeError(f"save_hparams_to_yaml needs a mapping or a Namespace, got {type(hparams).__name__}.")
    with open(config_yaml, "w", encoding="utf-8") as f:
        f.write(yaml_text(values))
