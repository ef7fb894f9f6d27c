"""``log_model``: which checkpoints a logger uploads and when, by Lightning's rule (W&B and MLflow loggers).

Owns the choice: ``log_model=True`` uploads, when the run ends, the checkpoints a `ModelCheckpoint` keeps
(``last``, the best, the top k); ``"all"`` (or ``True`` with ``save_top_k=-1``) uploads each one as it is saved. It
owns the record of what went up (a name is uploaded again only when a new folder stands under it, as ``last`` after
each save) and the description sent with each: the score, the original name, the callback's settings, and the
aliases ``latest`` and ``best``. It does not own the upload itself (each logger's), nor when a checkpoint is
complete: `ModelCheckpoint` notifies the loggers on the main process once a save is in place, and saves in the
foreground while a logger uploads (`Logger.uploads_checkpoints`). `UploadsCheckpoints` is the part the W&B and
MLflow loggers share: the hook that asks `ModelUploads` what is due and hands it to the logger's own transfer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelUploads", "Upload", "UploadsCheckpoints"]

# The callback's settings sent with each upload, under the keys Lightning's artifacts carry (a tool that reads those
# finds them): (key, the attribute of ModelCheckpoint).
_SETTINGS = (("monitor", "monitor"), ("mode", "mode"), ("save_last", "save_last"), ("save_top_k", "save_top_k"),
             ("save_weights_only", "save_weights_only"), ("_every_n_train_steps", "every_n_train_steps"))


@dataclass(frozen=True)
class Upload:
    """One checkpoint folder to upload, with what describes it."""

    path: str
    aliases: list[str]  # ["latest"], or ["latest", "best"] for the callback's best
    score: float | None
    settings: dict[str, Any]  # the callback's settings (_SETTINGS)
    callback_class: str = "ModelCheckpoint"

    def metadata(self, settings_key: str | None = None) -> dict[str, Any]:
        """Lightning's description: ``{"score", "original_filename", key: {settings}}``; the key is the callback's
        class name unless given (Lightning's MLflow logger says ``"Checkpoint"``)."""
        return {"score": self.score, "original_filename": os.path.basename(self.path),
                settings_key or self.callback_class: self.settings}


class ModelUploads:
    """What a logger with ``log_model`` uploads (see the module docstring).

    Example:
        >>> uploads = ModelUploads("all", "WandbLogger")
        >>> uploads.after_save(checkpoint_callback)      # doctest: +SKIP
        [Upload(path='/runs/checkpoints/epoch=0-step=4.ckpt', aliases=['latest', 'best'], ...)]
    """

    def __init__(self, log_model: bool | str, owner: str) -> None:
        if not isinstance(log_model, (bool, str)):
            raise TypeError(f"{owner}(log_model={log_model!r}) has type {type(log_model).__name__}; expected "
                            "True, False or 'all'.")
        if log_model not in (True, False, "all"):
            raise ValueError(f"{owner}(log_model={log_model!r}) is not a choice. Expected False (no uploads), True "
                             "(the kept checkpoints, when the run ends) or 'all' (each checkpoint when it is saved).")
        self.mode = log_model
        self._uploaded: dict[str, int] = {}  # path -> the modification time of the folder that went up
        self._at_end: dict[int, Any] = {}  # id -> callback whose checkpoints go up at the end

    @property
    def active(self) -> bool:
        """Whether checkpoints are uploaded at all."""
        return self.mode is not False

    def after_save(self, callback: Any) -> list[Upload]:
        """The uploads due after ``callback`` saved; with ``log_model=True`` it is remembered for :meth:`at_end`."""
        if self.mode == "all" or (self.mode is True and getattr(callback, "save_top_k", None) == -1):
            return self._new(callback)
        if self.mode is True:
            self._at_end[id(callback)] = callback
        return []

    def at_end(self) -> list[Upload]:
        """The uploads due when the run ends (``log_model=True``): what each remembered callback keeps."""
        callbacks, self._at_end = list(self._at_end.values()), {}
        return [upload for callback in callbacks for upload in self._new(callback)]

    def _new(self, callback: Any) -> list[Upload]:
        """The callback's checkpoints not uploaded yet (or rewritten since), oldest first."""
        scores: dict[str, Any] = {}
        if getattr(callback, "last_model_path", ""):
            scores[callback.last_model_path] = getattr(callback, "current_score", None)
        best = getattr(callback, "best_model_path", "")
        if best:
            scores[best] = getattr(callback, "best_model_score", None)
        scores.update(getattr(callback, "best_k_models", {}))
        found = []
        for path, score in scores.items():
            try:
                stamp = os.stat(path).st_mtime_ns
            except FileNotFoundError:  # evicted, or never written
                continue
            if self._uploaded.get(path, -1) < stamp:
                found.append((stamp, path, score))
        settings = {key: getattr(callback, name) for key, name in _SETTINGS if hasattr(callback, name)}
        uploads = []
        for stamp, path, score in sorted(found):
            self._uploaded[path] = stamp
            value = score.item() if hasattr(score, "item") else score  # a tensor or NumPy score as a number
            aliases = ["latest", "best"] if path == best else ["latest"]
            uploads.append(Upload(path, aliases, value, settings, type(callback).__name__))
        return uploads


class UploadsCheckpoints:
    """The ``log_model`` part of a logger (W&B's, MLflow's): the logger builds ``self._uploads = ModelUploads(...)``
    and defines ``_upload(uploads)``, the backend's own transfer."""

    _uploads: ModelUploads

    @property
    def uploads_checkpoints(self) -> bool:
        """Whether ``log_model`` uploads checkpoints (then `ModelCheckpoint` saves in the foreground)."""
        return self._uploads.active

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """With ``log_model``: uploads what the save made due (``"all"``), or remembers the callback for the end."""
        self._upload(self._uploads.after_save(checkpoint_callback))

    def _upload(self, uploads: list[Upload]) -> None:
        raise NotImplementedError(f"{type(self).__name__}._upload(uploads): the backend's transfer of the checkpoints")
