"""Checks a checkpoint against the objects it is about to be loaded into, before any of them changes.

Owns: the comparison of a ``save_state`` folder's weights (names and shapes, from the safetensors headers: no data
is read) with each model, and of each saved optimizer state (parameter groups, the shapes of per-parameter state)
with its optimizer. ``load_state`` runs every check first, so that a checkpoint that does not fit leaves the run
exactly as it was (all or nothing) and the error names the checkpoint, the file, the key and both shapes. Does not
own the loading itself (``checkpoint.py``, ``weights.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import torch

from .safetensors_io import read_safetensors
from .weights import TIED_KEY, MismatchedKeysError, key_mismatch, strip_compile_prefix


class StateMismatchError(ValueError):
    """A checkpoint's state does not fit the model or optimizer it is loaded into; nothing was changed."""


def _saved_shapes(file: str) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """Names and shapes of the tensors in a safetensors file (header only), and its tied-weight aliases."""
    shapes, metadata = read_safetensors(file, data=False)
    try:
        tied = json.loads(metadata.get(TIED_KEY, "{}"))
    except ValueError as e:  # altered metadata: reported as the whole header is
        raise ValueError(f"{file} is not a readable safetensors file ({e}); it may be truncated or altered.") from e
    return ({strip_compile_prefix(k): shape for k, shape in shapes.items()},
            {strip_compile_prefix(k): strip_compile_prefix(v) for k, v in tied.items()})


def _listing(rows: list[str]) -> str:
    return "; ".join(rows[:5]) + (f"; and {len(rows) - 5} more" if len(rows) > 5 else "")


def check_weights(model: torch.nn.Module, file: str, checkpoint: str, strict: bool) -> None:
    """Raises when ``file``'s tensors cannot be loaded into ``model``: a shape differs (always), or keys are
    missing or unexpected (with ``strict``)."""
    saved, tied = _saved_shapes(file)
    current = {strip_compile_prefix(k): tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}
    wrong = [f"{k!r} saved {list(saved[k])}, the model's {list(current[k])}"
             for k in saved if k in current and saved[k] != current[k]]
    if wrong:
        raise StateMismatchError(
            f"{checkpoint}: {os.path.basename(file)} does not fit {type(model).__name__}: {_listing(wrong)}. Nothing "
            "was loaded. Build the model with the sizes it had when this checkpoint was saved.")
    missing, unexpected, _ = key_mismatch(model, set(saved) | set(tied))
    if strict and (missing or unexpected):
        raise MismatchedKeysError(
            f"{checkpoint}: {os.path.basename(file)} does not fit {type(model).__name__}: missing keys {missing}, "
            f"unexpected keys {unexpected}. Nothing was loaded; load_state(strict=False) loads the matching keys "
            "(the optimizers must still match).")


def check_optimizer(optimizer: Any, saved: Mapping[str, Any], checkpoint: str, label: str) -> None:
    """Raises when the saved optimizer state cannot be loaded into ``optimizer``: other parameter groups, or
    per-parameter state (momentum, Adam's moments) of another shape than the parameter it belongs to."""
    groups = [list(g["params"]) for g in optimizer.param_groups]
    saved_groups = [list(g.get("params", [])) for g in saved.get("param_groups", [])]
    if [len(g) for g in groups] != [len(g) for g in saved_groups]:
        raise StateMismatchError(
            f"{checkpoint}: {label} was saved with parameter groups of {[len(g) for g in saved_groups]} parameters; "
            f"this optimizer has {[len(g) for g in groups]}. A layer was added or removed since; nothing was loaded. "
            "Resume with the model and optimizer as they were, or start the optimizer afresh (load the weights "
            "alone with load_checkpoint_in_model).")
    state = saved.get("state", {})
    wrong = []
    for params, ids in zip(groups, saved_groups):
        for param, key in zip(params, ids):
            for name, value in (state.get(key) or {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) != tuple(param.shape):
                    wrong.append(f"state {name!r} of parameter {key}: saved {list(value.shape)}, the parameter's "
                                 f"{list(param.shape)}")
    if wrong:
        raise StateMismatchError(f"{checkpoint}: {label} does not fit the optimizer's parameters: {_listing(wrong)}. "
                                 "Nothing was loaded.")
