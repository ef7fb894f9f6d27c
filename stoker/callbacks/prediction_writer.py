"""`BasePredictionWriter`: write what ``Trainer.predict`` produces, batch by batch or all at the end.

Owns: when the writing methods are called (``write_interval``) and what they receive. The writing itself is the
subclass's: a file per batch, one file per process, a database. In several processes every process writes its own
share (its shard of the data); name files by ``trainer.accelerator.process_index``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["BasePredictionWriter"]

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Base class for writing predictions: subclass it and define ``write_on_batch_end`` and/or
    ``write_on_epoch_end``.

    With ``write_interval="batch"``, :meth:`write_on_batch_end` is called after every ``predict_step``; with
    ``"epoch"``, :meth:`write_on_epoch_end` is called once when ``predict`` has run every loader, with all the
    predictions of this process; ``"batch_and_epoch"`` calls both. Predictions are given as ``predict_step``
    returned them (on the device, unless the step moved them). ``Trainer.predict`` still returns the predictions
    too.

    ``batch_indices`` are the dataset indices of the samples in the batch, as the loader's batch sampler gave them
    (in several processes, this process's share; samples repeated to even out the last batches included), so that
    predictions written by every process can be put back in dataset order. A loader without a batch sampler (an
    iterable dataset) has none: ``batch_indices`` is then None.

    Args:
        write_interval: ``"batch"``, ``"epoch"`` or ``"batch_and_epoch"``.

    Example:
        >>> class TorchWriter(BasePredictionWriter):
        ...     def __init__(self, folder):
        ...         super().__init__(write_interval="epoch")
        ...         self.folder = folder
        ...     def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
        ...         rank = trainer.accelerator.process_index
        ...         torch.save(predictions, os.path.join(self.folder, f"predictions_{rank}.pt"))
        >>> trainer = Trainer(callbacks=[TorchWriter("out")])   # doctest: +SKIP
        >>> trainer.predict(module, loader)                      # doctest: +SKIP
    """

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ValueError(f"`write_interval` should be one of {list(_INTERVALS)}. "
                             f"(BasePredictionWriter(write_interval={write_interval!r}) is not an interval.)")
        self.write_interval = write_interval
        self._on_batch = write_interval in ("batch", "batch_and_epoch")
        self._on_epoch = write_interval in ("epoch", "batch_and_epoch")
        self._predictions: list[list[Any]] = []
        self._indices: list[list[Any]] = []

    @property
    def interval(self) -> str:
        """The ``write_interval`` (Lightning's attribute name)."""
        return self.write_interval

    # -- what subclasses define -----------------------------------------------------------------------------------
    def write_on_batch_end(self, trainer: TrainerView, module: Any, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int) -> None:
        """Writes the prediction of one batch (``write_interval`` ``"batch"`` or ``"batch_and_epoch"``)."""
        raise NotImplementedError(
            f"{type(self).__name__}(write_interval={self.write_interval!r}) calls write_on_batch_end after every "
            f"predict batch, but {type(self).__name__} does not define it. Define write_on_batch_end(self, trainer, "
            "module, prediction, batch_indices, batch, batch_idx, dataloader_idx), or use write_interval='epoch'."
        )

    def write_on_epoch_end(self, trainer: TrainerView, module: Any, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        """Writes all predictions of this process once ``predict`` is done (``"epoch"`` or ``"batch_and_epoch"``).

        ``predictions`` is a list of batch predictions, or, when ``predict`` ran several loaders, one such list per
        loader. ``batch_indices`` is always one list per loader (as in Lightning), holding each batch's indices.
        """
        raise NotImplementedError(
            f"{type(self).__name__}(write_interval={self.write_interval!r}) calls write_on_epoch_end when predict "
            f"ends, but {type(self).__name__} does not define it. Define write_on_epoch_end(self, trainer, module, "
            "predictions, batch_indices), or use write_interval='batch'."
        )

    # -- hooks ----------------------------------------------------------------------------------------------------
    def on_predict_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        self._predictions, self._indices = [], []

    def on_predict_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        indices = _batch_indices(trainer, batch_idx)
        if self._on_batch:
            self.write_on_batch_end(trainer, module, outputs, indices, batch, batch_idx, dataloader_idx)
        if self._on_epoch:
            while len(self._predictions) <= dataloader_idx:
                self._predictions.append([])
                self._indices.append([])
            self._predictions[dataloader_idx].append(outputs)  # a reference: predict keeps these objects anyway
            self._indices[dataloader_idx].append(indices)

    def on_predict_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if not self._on_epoch:
            return
        loaders = max(len(trainer.stage_record.loader_batches.get("predict") or [1]), len(self._predictions), 1)
        missing = [[] for _ in range(loaders - len(self._predictions))]
        per_loader, indices = self._predictions + missing, self._indices + [list(m) for m in missing]
        self._predictions, self._indices = [], []
        self.write_on_epoch_end(trainer, module, per_loader[0] if loaders == 1 else per_loader, indices)


def _batch_indices(trainer: TrainerView, batch_idx: int) -> Any:
    """The dataset indices of batch ``batch_idx`` of the loader being read: the predict loop has that loader's
    batch sampler record what it hands out (``recorded``, ahead of the batches by the loader's prefetching, so it
    is looked up by position); None when it records nothing."""
    loaders = trainer.accelerator.iterating_loaders
    sampler = getattr(loaders[-1], "sharded_sampler", None) if loaders else None
    recorded = getattr(sampler, "recorded", None)
    return recorded[batch_idx] if recorded is not None and batch_idx < len(recorded) else None
