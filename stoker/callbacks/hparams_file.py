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
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["HPARAMS_NAME", "plain_form", "read_hparams_file", "write_hparams"]

HPARAMS_NAME = "hparams.json"
_FORMAT = "stoker-hparams"


def plain_form(value: Any, *, for_json: bool) -> tuple[Any, bool]:
    """``value`` as the plain data a file keeps, and whether that form is complete (loading gets the value back).

    The one rule for every file that stores hyperparameters: a Trainer checkpoint (``for_json=False``: tensors are
    kept, mapping keys are written as text) and the ``hparams.json`` beside exported weights (``for_json=True``: no
    tensors, text keys only). Mappings (an OmegaConf ``DictConfig`` too) become dicts, sequences that are not text
    (a tuple, an OmegaConf ``ListConfig``) lists; anything else becomes its ``repr``, and the form is incomplete.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value, True
    if isinstance(value, torch.Tensor):
        return (repr(value), False) if for_json else (value, True)
    if isinstance(value, Mapping):
        forms = [(key, *plain_form(item, for_json=for_json)) for key, item in value.items()]
        complete = all(ok and (isinstance(key, str) or not for_json) for key, _, ok in forms)
        return {str(key): form for key, form, _ in forms}, complete
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        forms = [plain_form(item, for_json=for_json) for item in value]
        return [form for form, _ in forms], all(ok for _, ok in forms)
    return repr(value), False


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
    forms = {k: plain_form(v, for_json=True) for k, v in hparams.items()}
    kept = {k: form for k, (form, complete) in forms.items() if complete}
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
