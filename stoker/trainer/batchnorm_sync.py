"""``RunOptions(sync_batchnorm=True)`` (Lightning's ``Trainer(sync_batchnorm=True)``): in a fit on several processes
the module's batch-norm layers normalize with the statistics of every process's batch (torch's ``SyncBatchNorm``),
and the module gets its own layers back when the fit ends, as in Lightning.

Owns the swap both ways. Each layer is replaced in place and the new one takes the old one's parameters and buffers
(the same tensors), so the optimizers built on them need nothing and checkpoints hold the same names either way.
torch's ``SyncBatchNorm`` syncs GPU tensors only: on CPU processes the fit is refused at its start.
"""

from __future__ import annotations

import torch

__all__ = ["check_device", "restore_batchnorm", "sync_batchnorm"]


def check_device(device: torch.device) -> None:
    """The refusal of a multi-process fit whose processes are not on GPUs (see the module docstring)."""
    if device.type == "cpu":
        raise ValueError("Trainer(sync_batchnorm=True) with several processes needs them on GPUs: torch's "
                         "SyncBatchNorm syncs CUDA tensors only. Run on GPUs, or leave sync_batchnorm off on CPU "
                         "(each process then normalizes with its own batch's statistics).")


def sync_batchnorm(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Swaps ``module``'s batch-norm layers for ``SyncBatchNorm`` ones; returns the layers swapped out by name, for
    :func:`restore_batchnorm`."""
    before = dict(module.named_modules())
    if torch.nn.SyncBatchNorm.convert_sync_batchnorm(module) is not module:  # it swaps children in place
        raise TypeError(f"sync_batchnorm: the module itself is a {type(module).__name__}; wrap it in a module.")
    return {name: before[name] for name, layer in module.named_modules()
            if isinstance(layer, torch.nn.SyncBatchNorm) and before.get(name) is not layer}


def restore_batchnorm(module: torch.nn.Module, layers: dict[str, torch.nn.Module]) -> None:
    """Puts back the layers :func:`sync_batchnorm` swapped out, each holding the tensors the fit trained (its own,
    unless something replaced them) and the synced layer's mode."""
    for name, layer in layers.items():
        parent, _, attribute = name.rpartition(".")
        owner = module.get_submodule(parent) if parent else module
        synced = getattr(owner, attribute)
        if not isinstance(synced, torch.nn.SyncBatchNorm):
            continue  # the fit replaced it with something else: leave that
        for tensor_name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            setattr(layer, tensor_name, getattr(synced, tensor_name))
        layer.train(synced.training)
        setattr(owner, attribute, layer)
