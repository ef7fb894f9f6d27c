"""Single-file PyTorch checkpoints: a ``torch.save`` of a dict holding ``state_dict`` (what Lightning writes as a
``.ckpt`` file, and many hand-written loops as a ``.pt``), or of the weights alone, read so that a model trained
elsewhere loads into stoker.

Owns: telling such a file from the other things a checkpoint path may name, and reading it, for every caller
(``load_checkpoint_in_model``'s weight files, the Trainer's ``load_from_checkpoint`` / ``read_checkpoint`` /
``ckpt_path``). It is read with ``torch.load(weights_only=True)`` (tensors, containers and plain values only;
nothing in the file runs), unless the caller passed Lightning's ``weights_only=False`` for a file it trusts.
stoker's own checkpoints stay folders.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from typing import Any

import torch

__all__ = ["is_torch_file", "read_torch_file"]


def is_torch_file(path: str) -> bool:
    """Whether ``path`` is a file in ``torch.save``'s format (a zip archive holding ``data.pkl``)."""
    if not os.path.isfile(path) or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("/data.pkl") for name in archive.namelist())


def read_torch_file(path: str, caller: str, map_location: str | torch.device | None = None,
                    weights_only: bool | None = None) -> dict[str, Any]:
    """The dict in the ``torch.save`` file ``path``, which must hold a ``state_dict`` mapping (a file of tensors
    alone comes back as ``{"state_dict": tensors}``). ``caller`` names the call in the errors; ``weights_only=False``
    unpickles whatever the file holds (only for a file you trust)."""
    try:
        data = torch.load(path, map_location=map_location or "cpu", weights_only=weights_only is not False)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"{caller}: {path} holds objects that torch.load(weights_only=True) does not rebuild ({first}). Only a "
            "full unpickle reads it, which runs code from the file: if you trust the file, pass weights_only=False "
            "to load_from_checkpoint (the one call that takes it); or save the weights alone "
            "(torch.save(model.state_dict(), path), or save_model() for safetensors)."
        ) from error
    if isinstance(data, dict) and data and all(isinstance(v, torch.Tensor) for v in data.values()):
        return {"state_dict": data}  # torch.save(model.state_dict(), path): the weights alone
    if not isinstance(data, dict) or not isinstance(data.get("state_dict"), dict):
        found = f"a dict with the keys {sorted(map(str, data))[:8]}" if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{caller}: {path} is not a training checkpoint: expected a dict with a 'state_dict' (as "
                         f"Lightning's .ckpt files hold) or a dict of tensors, found {found}.")
    return data
