"""``--ckpt_path``'s hyperparameters: a checkpoint's saved ``hyper_parameters`` (what ``save_hyperparameters``
recorded) become the model's arguments, so that ``predict --ckpt_path=<ckpt>`` rebuilds the module trained with
``--model.width=8`` without repeating it; arguments given on the command line lose to the checkpoint's, as in
Lightning.

Reads a stoker checkpoint folder with ``stoker.read_checkpoint`` (a Lightning ``.ckpt`` file with ``torch.load``,
weights only); it writes nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from ..trainer.checkpoint_dict import read_checkpoint

__all__ = ["config_with_checkpoint_hparams"]


def _saved_hparams(path: str) -> dict[str, Any]:
    if os.path.isdir(path):
        checkpoint = read_checkpoint(path)
    elif os.path.isfile(path):
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    else:  # not a path on this disk ("last", a URL): the Trainer says what it makes of it
        return {}
    return dict(checkpoint.get("hyper_parameters") or {})


def config_with_checkpoint_hparams(parser: Any, config: Any, subcommand: str) -> Any:
    """``config`` with the model's arguments replaced by those saved in ``--ckpt_path`` (unchanged without one)."""
    path = config[subcommand].get("ckpt_path")
    if not path:
        return config
    hparams = _saved_hparams(os.fspath(path))
    hparams.pop("_instantiator", None)
    if not hparams:
        return config
    if "_class_path" in hparams:  # saved by a module given by class path (subclass mode)
        hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
    try:
        return parser.parse_object({subcommand: {"model": hparams}}, config)
    except SystemExit:
        sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
        raise
