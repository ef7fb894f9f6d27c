"""Folder names and folder operations for `ModelCheckpoint`.

Owns: filename templates (``"{epoch}-{val/loss:.3f}"`` -> ``"epoch=3-val_loss=0.123"``), names safe on every
file system and unique in ``dirpath``, and whole-folder copy/replace/remove that never leave a
half-written or half-deleted folder under a checkpoint's name. Temporary folders follow the
``.{name}.stoker-{tmp,old,del}`` convention of ``save_state``, so its crash recovery applies to them too;
replaced and removed folders go through the Accelerator's background deleter (``.{name}.stoker-del-{token}``).
The folder operations themselves are the engine's (the Accelerator's ``copy_checkpoint``, ``remove_checkpoint``,
``save_model_folder``).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from typing import Any

import torch

from stoker.accelerator import checkpoints_in, remove_checkpoint
from stoker.user_frame import user_stacklevel

_FIELD = re.compile(r"\{([^{}:]+)(:[^{}]*)?\}")
# Characters that are invalid or special on Windows, macOS or Linux file systems, and control characters.
_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
LAST_NAME = "last"
EXTENSION = ".ckpt"  # a checkpoint folder's name ends like Lightning's files (and its sharded checkpoint folders)
WEIGHTS_DIR = "weights"


def safe_name(name: str) -> str:
    """``name`` made valid as one folder name everywhere: ``"/"``, ``":"`` etc. become ``"_"``.

    Example:
        >>> safe_name("epoch=1-val/loss=0.25")
        'epoch=1-val_loss=0.25'
    """
    name = _UNSAFE.sub("_", name).rstrip(" .")
    if name.startswith("."):  # hidden names are reserved for temporary folders
        name = "_" + name[1:]
    if not name or name.split(".")[0].upper() in _RESERVED:
        name = "_" + name
    return name


def format_checkpoint_name(template: str, metrics: dict[str, Any], auto_insert_metric_name: bool = True) -> str:
    """Fills ``{name}`` / ``{name:spec}`` fields of ``template`` from ``metrics`` and makes the result safe.

    With ``auto_insert_metric_name`` each field becomes ``name=value``. A metric that is missing is
    written as ``nan``.

    Example:
        >>> format_checkpoint_name("{epoch}-{step}-{val/loss:.3f}", {"epoch": 2, "step": 40, "val/loss": 0.12345})
        'epoch=2-step=40-val_loss=0.123'
    """

    def field(match: re.Match) -> str:
        name, spec = match.group(1).strip(), (match.group(2) or ":")[1:]
        value = metrics.get(name, math.nan)
        if isinstance(value, torch.Tensor):
            value = value.item()
        try:
            text = format(value, spec)
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"ModelCheckpoint(filename={template!r}): cannot format {name}={value!r} with spec {spec!r} "
                f"({error}). Use a spec that fits numbers, e.g. '{{{name}:.4f}}'."
            ) from None
        return f"{name}={text}" if auto_insert_metric_name else text

    return safe_name(_FIELD.sub(field, template))


def unique_path(dirpath: str, name: str, replaceable: list[str], extension: str = EXTENSION,
                reserved: tuple[str, ...] = (LAST_NAME + EXTENSION, WEIGHTS_DIR), versioned: bool = True,
                start: int = 1) -> str:
    """``dirpath/{name}{extension}``, as ``{name}-v1{extension}``, ``-v2``... (from ``-v{start}``) when a folder we may
    not replace already has that name (or the name is one this layout reserves: ``last.ckpt``, ``weights``).
    ``versioned=False``: the existing folder is replaced instead (Lightning's ``enable_version_counter=False``)."""
    path, version = os.path.join(dirpath, name + extension), start - 1
    while (versioned and os.path.exists(path) and path not in replaceable) or os.path.basename(path) in reserved:
        version += 1
        path = os.path.join(dirpath, f"{name}-v{version}{extension}")
    return path


class Zeros(dict):
    """A metrics mapping where every name is 0 (to validate a filename template up front)."""

    def get(self, key: str, default: Any = None) -> Any:
        return 0


# The engine's folder removal (the ".{name}.stoker-del" convention of save_state, so its crash recovery applies):
# no half-deleted folder is ever left under the name. The checkpoint writer uses the Accelerator's methods instead.
remove_folder = remove_checkpoint


def check_dirpath(dirpath: str, what: str) -> None:
    """Fail now, not after the first epoch, when a file stands where the checkpoint folder must be created."""
    from stoker.loggers.folders import blocking_file

    path = blocking_file(dirpath)
    if path is not None:
        where = "is a file" if path == dirpath else f"cannot be created: {path!r} is a file"
        raise ValueError(f"{what}: {dirpath!r} {where}. Checkpoints are folders written inside dirpath; pass a "
                         "folder path (it is created if missing).")


def warn_if_earlier_run(dirpath: str) -> None:
    """Warns when a fresh ``fit`` is about to write into ``dirpath`` while it holds complete checkpoints already
    (an earlier run's): they stay beside the new ones (a taken name gets a ``-v1`` suffix, ``last`` too),
    and ``ckpt_path="last"`` takes whichever was saved last. (Lightning warns too: "Checkpoint directory ...
    exists and is not empty".)"""
    found = sorted(entry.name for entry, _, _ in checkpoints_in(dirpath))
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        warnings.warn(f"ModelCheckpoint: {dirpath} already holds checkpoints of an earlier run ({shown}). This fresh "
                      "run writes its own beside them (a taken name, 'last' too, gets a -v1 suffix), and "
                      "fit(ckpt_path='last') resumes the checkpoint saved last. Use another default_root_dir (or "
                      "dirpath) to keep runs apart, or fit(ckpt_path='last') to continue the earlier run.",
                      UserWarning, stacklevel=user_stacklevel())
