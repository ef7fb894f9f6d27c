"""The first half of a resume, before ``configure_optimizers`` (Lightning's order): the data module's state, the
``on_load_checkpoint`` hooks (the module's first) and the callbacks' states.

So ``configure_optimizers``, the loaders asked for next and everything after see what those restored (a module's
``on_load_checkpoint`` may set what its optimizers are built from, a data module's state what its loaders are built
from). The weights, the optimizers' and schedulers' states and the loop's position load after ``configure_optimizers``,
into the prepared objects (``checkpointing.restore``); until then the hooks' ``state_dict``, ``optimizer_states`` and
``lr_schedulers`` are read-only views read from the folder when a hook looks at them.

``validate``/``test``/``predict(ckpt_path=...)`` restore the same first half, then the weights (Lightning restores
a checkpoint's modules and callbacks before an evaluation too).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..user_frame import user_stacklevel
from .checkpoint_dict import folder_states
from .checkpointing import eval_checkpoint, load_weights, same_key
from .hook_checkpoint import add_state_views
from .loading import trainer_checkpoint, trainer_own

if TYPE_CHECKING:
    from .parts import TrainerParts

__all__ = ["restore_for_evaluation", "restore_modules_and_callbacks"]


def restore_modules_and_callbacks(trainer: TrainerParts, path: str | None) -> dict[str, Any]:
    """The module docstring's first half for ``fit(ckpt_path=...)``, ``path`` as ``checkpointing.resolve_ckpt``
    found it; nothing when there is nothing to resume, or a path ``checkpointing.restore`` refuses (it says why).
    Returns the callbacks' saved states by ``same_key`` (for ``checkpointing.restore``, which needs some of them
    again once the optimizers exist)."""
    checkpoint = _trainer_checkpoint(path)
    return {} if checkpoint is None else _restore(trainer, checkpoint, path)


def restore_for_evaluation(trainer: TrainerParts, ckpt_path: Any, model: Any) -> None:
    """``validate``/``test``/``predict(ckpt_path=...)``, as Lightning restores before an evaluation: the same first
    half as a resume (the data module's state, the ``on_load_checkpoint`` hooks, the callbacks' states), then the
    weights into ``model``, the prepared model. A single-file checkpoint (Lightning's ``.ckpt``) and a folder that
    ``Accelerator.save_state`` wrote hold no Trainer state: their weights only."""
    path = eval_checkpoint(trainer, ckpt_path)
    if path is None:
        return
    checkpoint = _trainer_checkpoint(path)
    if checkpoint is not None:
        _restore(trainer, checkpoint, path)
    load_weights(trainer, path, model)


def _trainer_checkpoint(path: str | None) -> dict[str, Any] | None:
    """The checkpoint dict of a Trainer checkpoint folder, without the weights and optimizer states (None: not one,
    e.g. a ``save_weights_only`` folder, whose weights load alone; a fit's restore says what it lacks)."""
    from ..accelerator import STATE_NAME

    if path is None or not os.path.isfile(os.path.join(path, STATE_NAME)):
        return None
    payload = trainer_checkpoint(path, check_all=False)  # the files read here are checked; load_state checks all
    return None if payload is None else trainer_own(payload)[0]


def _restore(trainer: TrainerParts, checkpoint: dict[str, Any], path: str) -> dict[str, Any]:
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and "datamodule" in checkpoint:
        datamodule.load_state_dict(checkpoint["datamodule"])
    if trainer.hooks.has("on_load_checkpoint"):  # the views only for a hook to read
        add_state_views(checkpoint, *folder_states(path))
        trainer.hooks.call("on_load_checkpoint", checkpoint)
    saved = checkpoint.get("callbacks", {})
    states = {same_key(key): state for key, state in saved.items()}
    present = {same_key(callback.state_key): callback for callback in trainer.callbacks}
    for key, callback in present.items():
        if key in states:
            callback.load_state_dict(states[key])
    _warn_missing_callbacks(saved, set(present))
    return states


def _warn_missing_callbacks(states: Mapping[str, Any], present: set[str]) -> None:
    """Warns when the checkpoint holds the state of callbacks this run does not have (a callback without state,
    such as the progress bar, may come and go freely)."""
    missing = [key for key, state in states.items() if state and same_key(key) not in present]
    if missing:
        warnings.warn(f"The checkpoint holds the state of callbacks this Trainer does not have, so it is not "
                      f"restored. Please add the following callbacks: {missing} (with the same arguments, which "
                      "make up each key) to resume them too.", UserWarning, stacklevel=user_stacklevel())
