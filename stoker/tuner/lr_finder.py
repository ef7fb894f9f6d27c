"""The learning-rate range test (Lightning's ``lr_find``): a short trial fit whose learning rate grows from
``min_lr`` to ``max_lr`` step by step, recording the smoothed training loss at each rate.

Owns the sweep (the rates, set on the optimizer's groups before each optimizer step, the module's schedulers left
out), the smoothing and the divergence stop, the result (:class:`LRFinder`: ``results``, ``suggestion()``,
``plot()``) and the ``lr`` / ``learning_rate`` attribute lookup. The trial itself and the undoing of it:
``trial.py``. Differences from Lightning: the rates run from exactly ``min_lr`` to exactly ``max_lr`` (geometric or
evenly spaced, ``num_training`` of them); the smoothing's bias correction counts the recorded steps; a non-finite
loss ends the sweep.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ..callbacks import Callback
from .trial import Trial, attribute_holders, check_count, set_attribute

if TYPE_CHECKING:
    from ..trainer import Trainer, TrainingModule

log = logging.getLogger(__name__)
MODES = ("exponential", "linear")


class LRFinder:
    """What a learning-rate sweep found: ``results["lr"]`` (the rate of each optimizer step) and
    ``results["loss"]`` (the smoothed loss after it).

    Example:
        >>> finder = Tuner(trainer).lr_find(module)                   # doctest: +SKIP
        >>> finder.suggestion(), len(finder.results["lr"])           # doctest: +SKIP
        (0.0012, 100)
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        if mode not in MODES:
            raise ValueError(f"`mode` should be either of ('exponential', 'linear'): lr_find(mode={mode!r}) is not a "
                             "sweep.")
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self.optimal_index: int | None = None

    def rates(self) -> list[float]:
        """The ``num_training`` rates of the sweep, from ``lr_min`` to ``lr_max`` inclusive."""
        n, low, high = self.num_training, self.lr_min, self.lr_max
        fractions = [i / (n - 1) if n > 1 else 0.0 for i in range(n)]
        if self.mode == "linear":
            return [low + (high - low) * f for f in fractions]
        return [low * (high / low) ** f for f in fractions]

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the loss falls fastest (the most negative slope of loss over rate), leaving out the first
        ``skip_begin`` and the last ``skip_end`` points and any non-finite loss; None with fewer than two points."""
        lrs, losses = self.results["lr"], self.results["loss"]
        kept = [i for i in range(skip_begin, len(losses) - skip_end) if math.isfinite(losses[i])]
        if len(kept) < 2:
            log.error("lr_find has %d usable loss values (after skipping %d at the start and %d at the end, and the "
                      "non-finite ones); a suggestion needs at least 2. Raise num_training or give more batches.",
                      len(kept), skip_begin, skip_end)
            self.optimal_index = None
            return None
        slope = torch.gradient(torch.tensor([float(losses[i]) for i in kept], dtype=torch.float64),
                               spacing=(torch.tensor([float(lrs[i]) for i in kept], dtype=torch.float64),))[0]
        self.optimal_index = kept[int(torch.argmin(slope))]
        return lrs[self.optimal_index]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """Loss over learning rate (log scale for an exponential sweep) with matplotlib, on ``ax`` or a new figure,
        which is returned; ``suggest`` marks the suggestion, ``show`` shows the figure."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError("LRFinder.plot() draws with matplotlib, which is not installed: "
                              "pip install matplotlib") from error
        figure, ax = plt.subplots() if ax is None else (ax.figure, ax)
        ax.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None:
            i = self.optimal_index
            ax.plot(self.results["lr"][i], self.results["loss"][i], marker="o", markersize=10, color="red")
        if show:
            plt.show()
        return figure


_LRFinder = LRFinder  # the name Lightning's module path exposes (its type hints and tests import it)


class _Sweep(Callback):
    """Sets each optimizer step's rate and records the smoothed loss after it; asks the fit to stop when the loss
    diverges (``threshold`` times the best smoothed loss so far) or is not finite."""

    def __init__(self, finder: LRFinder, threshold: float | None, beta: float = 0.98) -> None:
        self.finder, self.threshold, self.beta = finder, threshold, beta
        self.rates = finder.rates()
        self.average, self.best, self.open = 0.0, math.inf, False

    def on_train_start(self, trainer: Trainer, module: TrainingModule) -> None:
        if len(trainer.optimizers) != 1:
            raise ValueError(f"`model.configure_optimizers()` returned {len(trainer.optimizers)}, but learning "
                             f"rate finder only works with single optimizer: lr_find sweeps the rate of one optimizer, "
                             f"and {type(module).__name__}.configure_optimizers() returned "
                             f"{len(trainer.optimizers)}.")
        trainer.lr_scheduler_configs = []  # the sweep sets the rate itself; a scheduler would overwrite it
        trainer.fit_run.step_schedulers = []

    def on_train_batch_start(self, trainer: Trainer, module: TrainingModule, batch: Any, batch_idx: int) -> None:
        if self.open:  # an accumulation window is open: its rate was set at its first batch
            return
        self.open = True
        # a step skipped (fp16 overflow) does not count toward max_steps: more windows than rates can come
        rate = self.rates[min(len(self.finder.results["lr"]), len(self.rates) - 1)]
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = rate
        self.finder.results["lr"].append(rate)

    def on_train_batch_end(self, trainer: Trainer, module: TrainingModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not trainer.window_closed:
            return
        self.open = False
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        recorded = self.finder.results["loss"]
        if loss is None:  # training_step returned None: no value; NaN keeps the two lists in step
            recorded.append(math.nan)
            return
        value = float(loss)
        self.average = self.beta * self.average + (1 - self.beta) * value
        smoothed = self.average / (1 - self.beta ** (len(recorded) + 1))  # the average's bias toward 0, removed
        diverged = self.threshold is not None and bool(recorded) and smoothed > self.threshold * self.best
        if diverged or not math.isfinite(smoothed):
            trainer.should_stop = True
        self.best = min(self.best, smoothed)
        recorded.append(smoothed)


def lr_attribute(module: TrainingModule, datamodule: Any, attr_name: str) -> tuple[str, list[Any]]:
    """The name of the module's learning-rate attribute (``attr_name``, else ``lr``, else ``learning_rate``) and
    where it lives (the module, its ``hparams``); AttributeError when there is none."""
    for name in (attr_name,) if attr_name else ("lr", "learning_rate"):
        holders = attribute_holders(module, datamodule, name)
        if holders:
            return name, holders
    wanted = repr(attr_name) if attr_name else "'lr' or 'learning_rate'"
    raise AttributeError(f"lr_find(update_attr=True) writes the rate it finds to {wanted}, but neither "
                         f"{type(module).__name__} nor its hparams has one. Add the attribute, or name yours with "
                         "lr_find(attr_name=...), or pass update_attr=False.")


def lr_find(trainer: Trainer, module: TrainingModule, loaders: dict[str, Any], min_lr: float = 1e-8,
            max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
            early_stop_threshold: float | None = 4.0, update_attr: bool = False, attr_name: str = "") -> LRFinder | None:
    """Runs the sweep (module docstring) with ``loaders`` (``fit``'s keyword arguments) and puts the Trainer and
    module back as they were; with ``update_attr`` the suggestion is written to the module's rate attribute."""
    if trainer.dry_run:
        warnings.warn("Skipping learning rate finder since `fast_dev_run` is enabled.", UserWarning, stacklevel=3)
        return None
    check_count("lr_find(num_training=...) (optimizer steps)", num_training, 1)
    if not (min_lr > 0 and max_lr > 0):
        raise ValueError(f"lr_find(min_lr={min_lr!r}, max_lr={max_lr!r}): both rates must be > 0.")
    target = lr_attribute(module, loaders.get("datamodule"), attr_name) if update_attr else None
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    with Trial(trainer, module) as trial:
        trial.run("fit", loaders, [_Sweep(finder, early_stop_threshold)], max_steps=num_training, max_epochs=None,
                  limit_val_batches=0)
    if len(finder.results["loss"]) < num_training:
        log.info("lr_find stopped after %d of %d steps: the loss diverged.", len(finder.results["loss"]), num_training)
    if target is not None and (suggestion := finder.suggestion()) is not None:
        set_attribute(target[1], target[0], suggestion)
    return finder
