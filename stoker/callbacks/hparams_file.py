"""The ``hparams.json`` file written beside exported weights, so that ``load_from_checkpoint`` can rebuild the module.

Owns: the file's name and format, writing it (``ModelCheckpoint(export_weights=True | save_weights_only=True)``) and
reading it back (``TrainingModule.load_from_checkpoint``, in ``stoker.trainer.loading``). It lives in the callbacks
layer, below the Trainer, because the callback that writes it may not import the Trainer's modules; the Trainer
imports it from here (a downward import), so the writer and the reader share one definition of the format.

Values JSON cannot hold (a sub-model, an arbitrary object) are not written; their names are listed under
``not_stored`` and loading asks for them again as overrides.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["HPARAMS_NAME", "read_hparams_file", "write_hparams"]

HPARAMS_NAME = "hparams.json"
_FORMAT = "stoker-hparams"


def _jsonable(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_jsonable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _jsonable(v) for k, v in value.items())
    return False


def write_hparams(module: Any, folder: str | os.PathLike, extra: dict[str, str] | None = None) -> str | None:
    """Writes ``module.hparams`` to ``folder/hparams.json`` (values JSON cannot hold are listed by name), with
    ``extra`` entries beside them (the Trainer's record of a container argument, ``hparams.container_keys``).

    Returns the file's path, or None when the module has no hyperparameters.

    Example:
        >>> write_hparams(module, "checkpoints/weights/last")   # doctest: +SKIP
        'checkpoints/weights/last/hparams.json'
    """
    hparams = dict(getattr(module, "hparams", {}) or {})
    if not hparams:
        return None
    kept = {k: v for k, v in hparams.items() if _jsonable(v)}
    record = {"format": _FORMAT, "version": 1, "class": f"{type(module).__module__}.{type(module).__qualname__}",
              "hyper_parameters": kept, "not_stored": sorted(set(hparams) - set(kept)), **(extra or {})}
    path = os.path.join(os.fspath(folder), HPARAMS_NAME)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    return path


def read_hparams_file(path: str) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """``(hyperparameters, names not stored, the whole record)`` from a file :func:`write_hparams` wrote.

    Raises:
        ValueError: ``path`` is JSON but not a stoker hparams file.
    """
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a stoker hparams file (format {_FORMAT!r}).")
    return dict(record["hyper_parameters"]), list(record.get("not_stored", [])), record
