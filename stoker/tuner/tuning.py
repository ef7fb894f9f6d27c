"""`Tuner`: Lightning's entry point to the learning-rate finder (``lr_finder.py``) and the batch-size search
(``batch_size_scaling.py``) on a Trainer; it checks the arguments and hands over the loaders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .batch_size_scaling import scale_batch_size
from .finders import BatchSizeFinder, LearningRateFinder
from .lr_finder import LRFinder, lr_find
from ..trainer.datamodule import DataModule

if TYPE_CHECKING:
    from ..trainer import Trainer, TrainingModule

METHODS = ("fit", "validate", "test", "predict")


class Tuner:
    """Finds a learning rate or a batch size for ``trainer``'s next run with trial runs that leave no trace (the
    module's weights, the RNG and the Trainer are as before; only the attribute written is new).

    Example:
        >>> tuner = Tuner(trainer)                                    # doctest: +SKIP
        >>> tuner.lr_find(module).suggestion()                        # also written to module.lr
        >>> tuner.scale_batch_size(module, mode="binsearch")          # written to module.batch_size
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def _check_no_finder(self, kind: type) -> None:
        if any(isinstance(c, kind) for c in self.trainer.callbacks):
            raise ValueError(f"Trainer is already configured with a `{kind.__name__}` callback, which runs this "
                             "search in every fit; remove it to use the Tuner (or keep it and drop the Tuner call).")

    def lr_find(self, model: TrainingModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
                dataloaders: Any = None, datamodule: DataModule | None = None, method: str = "fit",
                min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True, attr_name: str = ""
                ) -> LRFinder | None:
        """A learning-rate range test over ``num_training`` optimizer steps from ``min_lr`` to ``max_lr``
        (``mode``: "exponential" or "linear"), stopping once the smoothed loss exceeds ``early_stop_threshold``
        times its best (None: never); with ``update_attr`` the suggestion goes to ``model.lr`` /
        ``learning_rate`` (or ``attr_name``), in the module or its hparams. None under ``fast_dev_run``."""
        if method != "fit":
            raise ValueError(f"lr_find(method={method!r}): the learning-rate finder trains, so only method='fit' "
                             "works.")
        self._check_no_finder(LearningRateFinder)
        loaders = _loaders(method, train_dataloaders, val_dataloaders, dataloaders, datamodule)
        return lr_find(self.trainer, model, loaders, min_lr, max_lr, num_training, mode, early_stop_threshold,
                       update_attr, attr_name)

    def scale_batch_size(self, model: TrainingModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
                         dataloaders: Any = None, datamodule: DataModule | None = None, method: str = "fit",
                         mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                         batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int | None = 8192
                         ) -> int | None:
        """The largest batch size (see ``batch_size_scaling.py``) whose ``steps_per_trial`` steps of ``method``
        run without running out of memory, written to ``batch_arg_name`` (of the module, its hparams and/or the
        data module, which give the loaders) and returned; never above ``max_val`` (Lightning's 8192 by default,
        so that a run that never runs out of memory stops at a realistic size; None: the dataset's length only).
        None under ``fast_dev_run``."""
        self._check_no_finder(BatchSizeFinder)
        loaders = _loaders(method, train_dataloaders, val_dataloaders, dataloaders, datamodule)
        if set(loaders) - {"datamodule"}:
            raise ValueError("The Batch size finder cannot be used with dataloaders passed directly to `.fit()`: "
                             "scale_batch_size needs the loaders to come from the module's or data module's loader "
                             "hooks, which read the batch size it tries; loaders passed directly keep theirs. Move "
                             "them into train_dataloader() / val_dataloader() (...) or a DataModule.")
        return scale_batch_size(self.trainer, model, method, loaders, mode, steps_per_trial, init_val, max_trials,
                                batch_arg_name, margin, max_val)


def _loaders(method: str, train: Any, val: Any, loaders: Any, datamodule: DataModule | None) -> dict[str, Any]:
    """The keyword arguments of ``trainer.<method>`` for the loaders given (a data module may come in
    ``train_dataloaders``' place, as ``fit`` allows)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} is invalid. Should be one of {tuple(METHODS)}.")
    if isinstance(train, DataModule) and datamodule is None:
        train, datamodule = None, train
    if method == "fit" and loaders is not None:
        raise ValueError("In tuner with method='fit', `dataloaders` argument should be None, please consider setting "
                         "`train_dataloaders` and `val_dataloaders` instead (dataloaders= is for validate / test / "
                         "predict).")
    if method != "fit" and (train is not None or val is not None):
        raise ValueError(f"In tuner with `method`={method!r}, `train_dataloaders` and `val_dataloaders` arguments "
                         "should be None, please consider setting `dataloaders` instead (those two are for fit).")
    given = {"train_dataloaders": train, "val_dataloaders": val} if method == "fit" else {"dataloaders": loaders}
    return {k: v for k, v in {**given, "datamodule": datamodule}.items() if v is not None}
