"""``read_checkpoint``: a checkpoint folder as one dict, with the keys ``torch.load`` gives for a Lightning ``.ckpt``.

A stoker checkpoint is a folder of safetensors and JSON files, never a pickle, so ``torch.load(path)`` cannot open
it. A script that inspects or edits a checkpoint that way (``ckpt["state_dict"]``, ``ckpt["epoch"]``,
``ckpt["callbacks"]``) calls ``stoker.read_checkpoint(path)`` instead. It reads, and checks against the folder's
manifest, every file it takes; it never writes.

Owns: which files of a folder make which key. The files' formats are the engine's (``stoker/accelerator/
checkpointing/``); the Trainer's part and its keys are ``checkpointing.build_payload``'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ..version import __version__
from .hook_checkpoint import VERSION_KEY
from .loading import trainer_checkpoint, trainer_own
from ..accelerator import is_torch_file, read_torch_file

# Accelerate's file names for the objects saved once for all processes: optimizer.safetensors, optimizer_1...
_SHARED_STATE = re.compile(r"(optimizer|scheduler)(?:_(\d+))?\.safetensors")


def _folder(path: Any) -> str:
    """``path`` as a checkpoint folder, or the error that says what it is instead."""
    from ..accelerator import STATE_NAME

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"read_checkpoint: path must be a str or os.PathLike, got {type(path).__name__}.")
    folder = os.fspath(path)
    if os.path.isfile(folder):
        raise ValueError(f"read_checkpoint: {folder} is a file; a stoker checkpoint is a folder (written by "
                         "Trainer.save_checkpoint, ModelCheckpoint or Accelerator.save_state), and this file is not "
                         "a torch.save checkpoint either. Read a .safetensors weights file with "
                         "safetensors.torch.load_file.")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"read_checkpoint: no checkpoint folder at {folder!r}.")
    if not os.path.isfile(os.path.join(folder, STATE_NAME)):
        raise ValueError(f"read_checkpoint: {folder} holds no {STATE_NAME}, so it is not a checkpoint folder (a "
                         "weights export from save_model reads with stoker.accelerator.read_state_dict).")
    if any(name.endswith(".distcp") for name in os.listdir(folder)):
        raise ValueError(f"read_checkpoint: {folder} holds sharded (FSDP) weights, which only the processes of a run "
                         "read together: resume it with ckpt_path=, or export whole weights with "
                         "ModelCheckpoint(export_weights=True).")
    return folder


def _shared_states(folder: str, names: list[str], read: Callable[[str], Any] | None = None) -> dict[str, list[Any]]:
    """The optimizers' and schedulers' state dicts, each kind in the order they were prepared (``read``: how a file
    is read; the engine's ``load_tree``)."""
    from ..accelerator import load_tree

    found: dict[str, list[tuple[int, str]]] = {"optimizer": [], "scheduler": []}
    for name in names:
        match = _SHARED_STATE.fullmatch(name)
        if match:
            found[match.group(1)].append((int(match.group(2) or 0), name))
    return {kind: [(read or load_tree)(os.path.join(folder, name)) for _, name in sorted(files)]
            for kind, files in found.items()}


class _ReadWhenLooked(Mapping):
    """A state dict read from its file the first time it is looked at (a hook that never reads it costs nothing)."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read, self._state = read, None

    def _loaded(self) -> Mapping[str, Any]:
        if self._state is None:
            self._state = self._read()
        return self._state

    def __getitem__(self, name: str) -> Any:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


def folder_states(folder: str) -> tuple[Mapping[str, Any], list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """``(state_dict, optimizer_states, lr_schedulers)`` of a checkpoint folder as :func:`read_checkpoint` gives
    them, each read when first looked at: what a resume's ``on_load_checkpoint`` hooks see before the states load."""
    from ..accelerator import SAFE_WEIGHTS_NAME, load_tree, read_state_dict, verify_checkpoint

    weights = os.path.join(folder, SAFE_WEIGHTS_NAME)
    names = sorted(verify_checkpoint(folder, files=[])["files"])
    states = _shared_states(folder, names, read=lambda path: _ReadWhenLooked(lambda: load_tree(path)))
    state_dict = _ReadWhenLooked(lambda: _whole_weights(folder, weights, names, read_state_dict))
    return state_dict, states["optimizer"], states["scheduler"]


def _whole_weights(folder: str, weights: str, names: list[str], read: Callable[[str], Any]) -> Mapping[str, Any]:
    if os.path.isfile(weights):
        return read(weights)
    if any(name.endswith(".distcp") for name in names):
        raise ValueError(f"checkpoint['state_dict'] of {folder}: its weights are sharded (FSDP), which only the "
                         "processes of the run read together, when the fit loads them; read module.state_dict() "
                         "from on_fit_start instead.")
    return {}


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device | None = None) -> dict[str, Any]:
    """A checkpoint folder as the dict a Lightning ``.ckpt`` holds.

    Args:
        path: A folder written by ``Trainer.save_checkpoint``, ``ModelCheckpoint`` or ``Accelerator.save_state``;
            or a single-file PyTorch checkpoint (a Lightning ``.ckpt``), returned as ``torch.load`` gives it
            (read with ``weights_only=True``).
        map_location: The device every tensor goes to (None: the CPU, where the files are read).

    Returns:
        ``state_dict`` (the model's weights; of the first model for a folder of several), ``optimizer_states``
        and ``lr_schedulers`` (lists, in the order they were prepared) and ``pytorch-lightning_version`` (the
        stoker version reading it). A Trainer checkpoint adds ``epoch``, ``global_step``, ``loops``, ``callbacks``
        (by ``state_key``), ``hyper_parameters``, the data module's entries and what ``on_save_checkpoint`` hooks
        added.

    Raises:
        TypeError: ``path`` is not a path, or ``map_location`` not a device.
        FileNotFoundError: nothing at ``path``.
        ValueError: ``path`` is not a checkpoint folder, or holds sharded weights.
        CheckpointError: a file does not match the folder's manifest (it was changed or cut short).

    Example:
        >>> ckpt = stoker.read_checkpoint("checkpoints/last.ckpt")  # doctest: +SKIP
        >>> ckpt["global_step"], sorted(ckpt["state_dict"])  # doctest: +SKIP
    """
    from ..accelerator import SAFE_WEIGHTS_NAME, read_state_dict, send_to_device, verify_checkpoint

    if map_location is not None and not isinstance(map_location, (str, torch.device)):
        raise TypeError(f"read_checkpoint(map_location={map_location!r}): expected a device ('cpu', 'cuda:0', a "
                        "torch.device) or None.")
    if isinstance(path, (str, os.PathLike)) and is_torch_file(os.fspath(path)):
        return read_torch_file(os.fspath(path), "read_checkpoint", map_location)  # e.g. Lightning's .ckpt, as saved
    folder = _folder(path)
    payload = trainer_checkpoint(folder)  # checks every file against the manifest once, then reads the Trainer's part
    names = sorted(verify_checkpoint(folder, files=[])["files"])  # the manifest's names (no second checksum)
    checkpoint = trainer_own(payload)[0] if payload is not None else {}
    weights = os.path.join(folder, SAFE_WEIGHTS_NAME)
    checkpoint["state_dict"] = read_state_dict(weights) if os.path.isfile(weights) else {}
    states = _shared_states(folder, names)
    checkpoint["optimizer_states"], checkpoint["lr_schedulers"] = states["optimizer"], states["scheduler"]
    checkpoint[VERSION_KEY] = __version__
    return checkpoint if map_location is None else send_to_device(checkpoint, torch.device(map_location))
