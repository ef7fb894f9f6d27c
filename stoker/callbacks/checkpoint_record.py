"""What `ModelCheckpoint` remembers of its checkpoints: the kept set and the paths and scores read from it.

Owns the public record (``best_model_path``, ``best_model_score``, ``kth_best_model_path``, ``kth_value``,
``best_k_models``, ``last_model_path``), the values a script sets on it by hand (Lightning's attributes are plain,
so scripts assign them; a set value is reported until the next ranked save replaces the record), and the record's
state across a resume: names relative to ``dirpath`` (a moved run folder still finds them), a resume into another
folder, and which checkpoint the fit resumed from (top-k never deletes it: an existing checkpoint is never damaged).
Does not own when to save or which checkpoint is kept (checkpoint.py, checkpoint_ranking.py).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stoker.callbacks.base import Checkpoint, TrainerView
from stoker.callbacks.checkpoint_ranking import kept
from stoker.user_frame import user_stacklevel

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

__all__ = ["CheckpointRecord"]


def _settable(name: str, derive: Callable[[CheckpointRecord], Any], doc: str) -> property:
    """A record attribute read from the kept set (``derive``), which a script may also assign (until the next ranked
    save)."""
    def get(self: CheckpointRecord) -> Any:
        return self._assigned[name] if name in self._assigned else derive(self)

    def put(self: CheckpointRecord, value: Any) -> None:
        self._assigned[name] = value

    return property(get, put, doc=doc)


class CheckpointRecord(Checkpoint):
    """The record half of `ModelCheckpoint` (its attributes and its state); see that class."""

    dirpath: str | None
    monitor: str | None
    mode: str
    last_model_path: str

    def __init__(self) -> None:
        self._kept: dict[str, float] = {}  # path -> score (the step without monitor) of every kept checkpoint
        self._assigned: dict[str, Any] = {}  # record attributes a script set by hand
        self.last_model_path = ""
        self.current_score: float | None = None
        self._last_topk_step = self._last_save_step = -1
        self._pending_state: dict[str, Any] | None = None
        self.resumed_from = ""  # the checkpoint folder this fit resumed from: top-k never deletes it
        self._resume_hook: RemovableHandle | None = None  # the handle of the load-state hook that notes it

    def _derived_best_model_path(self) -> str:
        return kept(self._kept, self._minimize, best=True) or ""

    def _derived_best_model_score(self) -> float | None:
        path = kept(self._kept, self._minimize, best=True)
        return None if path is None or self.monitor is None else float(self._kept[path])

    def _derived_kth_best_model_path(self) -> str:
        return (self.monitor is not None and kept(self._kept, self._minimize, best=False)) or ""

    def _derived_kth_value(self) -> float | None:
        path = self._derived_kth_best_model_path()
        return float(self._kept[path]) if path else None

    best_model_path = _settable("best_model_path", _derived_best_model_path,
                                "Absolute path of the best kept checkpoint (``\"\"`` before one).")
    best_model_score = _settable("best_model_score", _derived_best_model_score,
                                 "The best kept checkpoint's score as a float; None before one or without ``monitor``.")
    kth_best_model_path = _settable("kth_best_model_path", _derived_kth_best_model_path,
                                    "The kept checkpoint the next better one displaces (the worst kept); ``\"\"`` "
                                    "without ``monitor``.")
    kth_value = _settable("kth_value", _derived_kth_value, "The score of ``kth_best_model_path``; None without one.")

    @property
    def best_k_models(self) -> dict[str, float]:
        return self._kept if self.monitor is not None else {}

    @best_k_models.setter
    def best_k_models(self, models: dict[str, float]) -> None:
        self._kept = dict(models)

    @property
    def _minimize(self) -> bool:
        return self.monitor is not None and self.mode == "min"

    def _ranked(self) -> None:
        """A ranked save changed the kept set: values set by hand no longer describe it."""
        self._assigned.clear()

    # -- state --------------------------------------------------------------------------------------------------
    def to_yaml(self, filepath: str | os.PathLike | None = None) -> None:
        """Writes ``best_k_models`` (path: score) as YAML to ``filepath`` (default ``{dirpath}/best_k_models.yaml``)."""
        import yaml

        self._require_dirpath()
        with open(filepath or os.path.join(self.dirpath, "best_k_models.yaml"), "w") as file:
            yaml.safe_dump({path: float(score) for path, score in self.best_k_models.items()}, file)

    def state_dict(self) -> dict[str, Any]:
        score = lambda value: None if value is None else float(value)
        return {
            "dirpath": self.dirpath or "",
            "monitor": self.monitor or "",
            "best_k_models": {os.path.basename(path): float(value) for path, value in self._kept.items()},
            "last_model_path": os.path.basename(self.last_model_path),
            "last_topk_step": self._last_topk_step,
            "last_save_step": self._last_save_step,
            # Lightning's keys, read back only when the run continues in another folder:
            "best_model_path": self.best_model_path, "best_model_score": score(self.best_model_score),
            "kth_best_model_path": self.kth_best_model_path, "kth_value": score(self.kth_value),
            "current_score": score(self.current_score),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.dirpath is None:
            self._pending_state = dict(state_dict)
        else:
            self._apply_state(state_dict)

    def _apply_state(self, state: dict[str, Any]) -> None:
        # Entries are names inside dirpath; a moved run folder still finds them. Vanished ones are dropped.
        names = dict(state.get("best_k_models", {}))
        self._kept = {os.path.join(self.dirpath, name): float(score) for name, score in names.items()
                      if os.path.isdir(os.path.join(self.dirpath, name))}
        self._assigned.clear()
        old = state.get("dirpath") or ""
        if old and names and not self._kept and os.path.abspath(old) != self.dirpath:
            self._another_folder(old, state)
        last = state.get("last_model_path") or ""
        self.last_model_path = os.path.join(self.dirpath, last) if last else ""
        self._last_topk_step = int(state.get("last_topk_step", -1))
        self._last_save_step = int(state.get("last_save_step", -1))

    def _another_folder(self, old: str, state: dict[str, Any]) -> None:
        """The run continues in a folder without its checkpoints: it ranks anew there, and ``best_model_path`` keeps
        naming the old folder's best (for ``ckpt_path="best"``) until the first ranked save."""
        best = state.get("best_model_path")
        if best:
            self.best_model_path = best
        warnings.warn(f"ModelCheckpoint: The dirpath has changed from {old!r} to {self.dirpath!r}, which holds none "
                      "of the checkpoints the resumed state kept. Top-k starts afresh there (the old folder's "
                      "checkpoints are left as they are); best_model_path names the old best until a new one is "
                      "saved.", UserWarning, stacklevel=user_stacklevel())

    def _watch_resume(self, trainer: TrainerView, stage: str) -> None:
        """From ``setup`` until ``teardown`` of a fit: note the folder a resume loads (every process loads it, through
        the Accelerator's load-state hooks, Accelerate's ``register_load_state_pre_hook``)."""
        if self._resume_hook is not None:
            self._resume_hook.remove()
        self._resume_hook, self.resumed_from = None, ""
        if stage == "fit":
            hooks = trainer.accelerator.checkpoint_hooks
            self._resume_hook = hooks.register(hooks.load, self._note_resume, "ModelCheckpoint")

    def _note_resume(self, models: list[torch.nn.Module], input_dir: str) -> None:
        self.resumed_from = os.path.realpath(input_dir)

    def _deletable(self, paths: list[str]) -> list[str]:
        """``paths`` without the checkpoint this fit resumed from (it leaves the top k, never the disk)."""
        return [p for p in paths if not self.resumed_from or os.path.realpath(p) != self.resumed_from]

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if self._resume_hook is not None:
            self._resume_hook.remove()
            self._resume_hook = None

    def _require_dirpath(self) -> None:
        if self.dirpath is None:
            raise RuntimeError("ModelCheckpoint has no dirpath yet: setup() sets it from the Trainer's "
                               "default_root_dir. Pass ModelCheckpoint(dirpath=...) to save outside a Trainer run.")
