"""torch's pruning re-parametrization, for `ModelPruning`'s checkpoints: find it, fold it, take it apart, put it back.

``torch.nn.utils.prune`` turns a pruned parameter ``p`` of a layer into the parameter ``p_orig`` (the same
``nn.Parameter``), the buffer ``p_mask`` and a forward pre-hook computing ``p = p_orig * p_mask``. The functions here
work on that layout by its public names only; parameters are named by their state-dict key in the pruned module
(``layer.mlp_1.weight``). What is saved when, and why, is ``pruning.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.utils.prune as torch_prune
from torch import nn

_ORIG, _MASK = "_orig", "_mask"


def is_pruned(layer: nn.Module, name: str) -> bool:
    """Whether ``layer.name`` is re-parametrized by torch's pruning."""
    return isinstance(getattr(layer, name + _ORIG, None), nn.Parameter) and hasattr(layer, name + _MASK)


def trained_values(layer: nn.Module, name: str) -> torch.Tensor:
    """The parameter's trained values: ``p_orig`` once pruned, else ``p``."""
    return getattr(layer, name + _ORIG) if is_pruned(layer, name) else getattr(layer, name)


def remove_all(module: nn.Module) -> None:
    """Removes the re-parametrization of every pruned parameter in ``module`` (``p`` becomes a parameter holding
    ``p_orig * p_mask``)."""
    for layer in module.modules():
        for name in [b[:-len(_MASK)] for b, _ in layer.named_buffers(recurse=False) if b.endswith(_MASK)]:
            if is_pruned(layer, name):
                torch_prune.remove(layer, name)


def fold(state: dict[str, torch.Tensor], keys: Iterable[str]) -> None:
    """In a state dict about to be saved: each of ``keys`` held as ``p_orig`` and ``p_mask`` becomes ``p``."""
    for key in keys:
        orig, mask = state.get(key + _ORIG), state.get(key + _MASK)
        if orig is not None and mask is not None:
            state[key] = mask.to(dtype=orig.dtype) * orig
            del state[key + _ORIG], state[key + _MASK]


def reparametrize_saved(module: nn.Module, names: Iterable[str], first: list[str]) -> None:
    """Before a checkpoint's weights are loaded into ``module``: re-parametrizes (with a mask of ones, which the load
    overwrites) each parameter that the weights' tensor ``names`` hold as ``p_orig`` and ``p_mask``; those in
    ``first`` first, in its order (the order they were pruned in, which the state dict's order follows)."""
    present = set(names)
    saved = {n[:-len(_ORIG)] for n in present if n.endswith(_ORIG) and n[:-len(_ORIG)] + _MASK in present}
    ordered = [key for key in first if key in saved]
    for key in ordered + sorted(saved - set(ordered)):
        path, _, name = key.rpartition(".")
        layer = module.get_submodule(path)
        if isinstance(getattr(layer, name, None), nn.Parameter):
            torch_prune.identity(layer, name)


def masks_of(module: nn.Module, keys: Iterable[str]) -> dict[str, Any]:
    """Of each pruned parameter among ``keys``: its mask (booleans) and the values ``p_orig`` holds under it."""
    found = {key: _locate(module, key) for key in keys}
    pruned = {key: (layer, name) for key, (layer, name) in found.items() if is_pruned(layer, name)}
    masks = {key: getattr(layer, name + _MASK) != 0 for key, (layer, name) in pruned.items()}
    hidden = {key: getattr(layer, name + _ORIG).detach()[~masks[key]] for key, (layer, name) in pruned.items()}
    return {"masks": masks, "hidden": hidden}


def restore_masks(module: nn.Module, saved: dict[str, Any]) -> None:
    """After plain weights were loaded: re-parametrizes each parameter of ``masks_of``'s result with its mask and
    puts back the values under it (a parameter already re-parametrized is left as it is)."""
    for key, mask in saved.get("masks", {}).items():
        layer, name = _locate(module, key)
        param = getattr(layer, name)
        if not isinstance(param, nn.Parameter):  # another ModelPruning of the same parameter did it
            continue
        mask = mask.to(param.device)
        torch_prune.custom_from_mask(layer, name, mask)
        with torch.no_grad():
            getattr(layer, name + _ORIG)[~mask] = saved["hidden"][key].to(param.device, param.dtype)


def _locate(module: nn.Module, key: str) -> tuple[nn.Module, str]:
    path, _, name = key.rpartition(".")
    return module.get_submodule(path), name
