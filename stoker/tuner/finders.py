"""Lightning's callbacks ``LearningRateFinder`` and ``BatchSizeFinder``: the tuner's searches run by the run itself.

Each searches in its ``setup`` hook, when the run has not yet prepared its optimizers or asked for its loaders, with
trial runs of its own (``trial.py``); the run then goes on with the rate or batch size found. (Lightning searches
in ``on_fit_start``, inside its loop; here a trial is a whole run, which must come before the run's own set-up.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..callbacks import Callback
from .batch_size_scaling import scale_batch_size
from .lr_finder import LRFinder, lr_find

if TYPE_CHECKING:
    from ..trainer import Trainer, TrainingModule


def _run_loaders(trainer: Trainer, stage: str) -> tuple[dict[str, Any], tuple[Any, Any]]:
    """The loaders the run being set up was given (as ``trainer.<stage>``'s keyword arguments), and fit's pair."""
    given = trainer.run_setup.requests.given if stage == "fit" else (None, None)
    loaders = {"train_dataloaders": given[0], "val_dataloaders": given[1], "datamodule": trainer.datamodule}
    return {k: v for k, v in loaders.items() if v is not None}, given


class LearningRateFinder(Callback):
    """Runs ``lr_find`` as a fit sets up; ``optimal_lr`` is its :class:`LRFinder`, and with ``update_attr`` the
    fit trains with the suggested rate (the module's ``configure_optimizers`` reads it).

    Example:
        >>> Trainer(callbacks=[LearningRateFinder(num_training_steps=50)]).fit(module)   # doctest: +SKIP
    """

    def __init__(self, min_lr: float = 1e-8, max_lr: float = 1.0, num_training_steps: int = 100,
                 mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                 attr_name: str = "") -> None:
        self.options = {"min_lr": min_lr, "max_lr": max_lr, "num_training": num_training_steps, "mode": mode,
                        "early_stop_threshold": early_stop_threshold, "update_attr": update_attr,
                        "attr_name": attr_name}
        self.optimal_lr: LRFinder | None = None

    def setup(self, trainer: Trainer, module: TrainingModule, stage: str) -> None:
        if stage == "fit":
            loaders, given = _run_loaders(trainer, stage)
            self.optimal_lr = lr_find(trainer, module, loaders, **self.options)
            trainer.run_setup.begin_fit(module, *given)  # the trial was a fit too: this one's loaders again


class BatchSizeFinder(Callback):
    """Runs ``scale_batch_size`` as a run (``fit``, ``validate``, ``test`` or ``predict``) sets up; the run then
    asks its loader hooks for loaders of the size found, ``optimal_batch_size``.

    Example:
        >>> Trainer(callbacks=[BatchSizeFinder(mode="binsearch")]).fit(module)           # doctest: +SKIP
    """

    def __init__(self, mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                 batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int | None = 8192) -> None:
        self.options = {"mode": mode, "steps_per_trial": steps_per_trial, "init_val": init_val,
                        "max_trials": max_trials, "batch_arg_name": batch_arg_name, "margin": margin,
                        "max_val": max_val}
        self.optimal_batch_size: int | None = None

    def setup(self, trainer: Trainer, module: TrainingModule, stage: str) -> None:
        loaders, given = _run_loaders(trainer, stage)
        if set(loaders) - {"datamodule"}:
            raise ValueError("BatchSizeFinder needs the loaders to come from the module's or data module's loader "
                             "hooks, which read the batch size it tries; loaders passed to fit keep theirs.")
        self.optimal_batch_size = scale_batch_size(trainer, module, stage, loaders, **self.options)
        if stage == "fit":
            trainer.run_setup.begin_fit(module, *given)
