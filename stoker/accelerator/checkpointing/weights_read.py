"""Exported weights read whole, as one state dict: for a module's own ``load_state_dict`` (``TrainingModule.
load_from_checkpoint`` loads through it, as Lightning does, so that a module overriding it sees every load).

The files, their formats and the loading of weights into a model tensor by tensor are ``weights.py``'s; this reads
the same files at once, on the CPU.
"""

from __future__ import annotations

import os

import torch

from .safetensors_io import read_safetensors
from .state_file import part_name
from .weights import weight_files, read_weight_file, strip_compile_prefix


def read_state_dict(checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor ``save_model`` wrote (a file, an index, or a folder holding one), under names without a
    ``torch.compile`` prefix, each tied alias under its own name too (tied tensors are stored once).

    Example:
        >>> model.load_state_dict(read_state_dict("export"), strict=True)  # doctest: +SKIP
    """
    files, tied = weight_files(os.fspath(checkpoint))
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        stored, file_tied = read_weight_file(path)
        tensors.update({strip_compile_prefix(k): v for k, v in stored.items()})
        tied = {**tied, **file_tied}
    aliases = {a: tensors[n] for a, n in tied.items() if n in tensors and a not in tensors}
    return {**tensors, **aliases}


def checkpoint_weight_names(folder: str | os.PathLike, index: int = 0) -> list[str]:
    """The tensor names in the weights of the ``index``-th prepared model of a ``save_state`` folder, read from the
    file's header only (empty where the folder holds no such file, e.g. FSDP's shards). For a load-state hook that
    must shape a model as its checkpoint was (``ModelPruning``), before the weights are checked and loaded.

    Example:
        >>> checkpoint_weight_names("checkpoints/last.ckpt")  # doctest: +SKIP
        ['layer.bias', 'layer.weight_mask', 'layer.weight_orig']
    """
    path = os.path.join(os.fspath(folder), part_name("model", index))
    return sorted(read_safetensors(path, data=False)[0]) if os.path.isfile(path) else []
