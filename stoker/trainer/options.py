"""`RunOptions`: how a fit may stop early or late, check itself first, and renew its loaders; `RunLimits`: when it
stops.

Owns the values only (checked here, once); the fit loop (``loops.py``), the sanity check (``evaluation.py``) and
set-up (``setup.py``) read them. ``Trainer(options=RunOptions(...))`` sets them; ``stoker.Trainer`` builds them
from Lightning's names (``min_epochs``, ``num_sanity_val_steps``, ...: ``stoker/compat/lightning/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, overload

from . import args as check


@dataclass
class RunLimits:
    """When a fit stops: after ``max_epochs`` epochs or ``max_steps`` applied optimizer steps, whichever comes first
    (None: no such limit; with neither, one epoch, or ``min_epochs``). Each value is checked whenever it is set
    (``-1`` is read as None). The loops read these; ``trainer.max_epochs`` / ``max_steps`` are views of them, which
    ``stoker.Trainer`` spells as Lightning does (``max_steps`` -1 for no limit).

    Example:
        >>> limits = RunLimits(max_epochs=-1, max_steps=10)
        >>> limits.max_epochs, limits.max_steps
        (None, 10)
    """

    max_epochs: int | None = None
    max_steps: int | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        infinite = " (infinite steps)" if name == "max_steps" else ""
        lightning = f"`{name}` must be a non-negative integer or -1{infinite}. You passed in {{value}}."
        super().__setattr__(name, check.optional_int(name, value, 0, none_aliases=(-1,), lightning=lightning))

    def steps_reached(self, applied: int) -> bool:
        """Whether ``applied`` optimizer steps reach ``max_steps`` (never, without one)."""
        return self.max_steps is not None and applied >= self.max_steps

    def epochs_to_run(self, min_epochs: int | None) -> int | None:
        """The epochs a fit runs to: ``max_epochs``; with neither limit, one (or ``min_epochs``); None: no limit."""
        if self.max_epochs is None and self.max_steps is None:
            return max(1, min_epochs or 0)
        return self.max_epochs


class HasLimits(Protocol):
    limits: RunLimits


class LimitView:
    """The Trainer's ``max_epochs`` / ``max_steps``: its ``limits``' value, read and set (setting checks it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.__doc__ = f"The fit's ``{name}`` (None: no such limit), kept in ``trainer.limits``."

    @overload
    def __get__(self, trainer: None, owner: type) -> LimitView: ...

    @overload
    def __get__(self, trainer: HasLimits, owner: type) -> int | None: ...

    def __get__(self, trainer: HasLimits | None, owner: type) -> int | None | LimitView:
        return self if trainer is None else getattr(trainer.limits, self.name)

    def __set__(self, trainer: HasLimits, value: int | None) -> None:
        setattr(trainer.limits, self.name, value)


@dataclass(frozen=True)
class RunOptions:
    """Options of a fit beyond its limits.

    Args:
        min_epochs: A stop request (``should_stop``) waits until this many epochs are done (None: no minimum).
        min_steps: Likewise in applied optimizer steps.
        num_sanity_val_steps: Batches of each val loader to run before training (Lightning's default 2; 0: none;
            None: every batch).
        reload_dataloaders_every_n_epochs: Ask the module's / data module's loader hooks again every n epochs.
        use_distributed_sampler: False keeps the user's own sampler (one process only).
        nonfinite_skip_limit: With ``on_nonfinite_loss="skip"``, this many skipped optimizer steps in a row end the
            fit with an error (a loss that stays NaN would otherwise skip every step and never reach ``max_steps``).
        dry_run: A debugging run (Lightning's ``fast_dev_run``): ModelCheckpoint and EarlyStopping decide nothing
            and write nothing.
        in_order_fit_loaders: ``fit`` reads its train loader in dataset order (a shuffling sampler is replaced, with a
            warning) and validates on that same loader: the same batches every epoch, trained on and validated on,
            e.g. to overfit a few batches while debugging (Lightning's ``overfit_batches``).
        inference_mode: ``validate``/``test``/``predict`` called on their own run under ``torch.inference_mode``
            (faster; what they return cannot enter autograd later); False: ``torch.no_grad``. A validation inside
            ``fit`` always runs under ``torch.no_grad``.
        record_logged_values: False: ``self.log`` / ``self.log_dict`` record nothing (each call warns), for runs
            that measure the loop's own speed (Lightning's ``barebones``).
        sync_batchnorm: In a fit on several processes (on GPUs), batch-norm layers normalize with the statistics of
            every process's batch (torch's ``SyncBatchNorm``); the module's own layers come back when the fit ends.

    Example:
        >>> Trainer(max_epochs=5, options=RunOptions(min_epochs=2, num_sanity_val_steps=2))  # doctest: +SKIP
    """

    min_epochs: int | None = None
    min_steps: int | None = None
    num_sanity_val_steps: int | None = 2
    reload_dataloaders_every_n_epochs: int = 0
    use_distributed_sampler: bool = True
    nonfinite_skip_limit: int = 100
    in_order_fit_loaders: bool = False
    dry_run: bool = False
    inference_mode: bool = False
    record_logged_values: bool = True
    sync_batchnorm: bool = False

    def __post_init__(self) -> None:
        check.optional_int("min_epochs", self.min_epochs, 0)
        check.optional_int("min_steps", self.min_steps, 0)
        check.optional_int("num_sanity_val_steps", self.num_sanity_val_steps, 0)
        check.optional_int("reload_dataloaders_every_n_epochs", self.reload_dataloaders_every_n_epochs, 0,
                           lightning="`reload_dataloaders_every_n_epochs` should be an int >= 0, got {value}.")
        check.flag("use_distributed_sampler", self.use_distributed_sampler)
        check.optional_int("nonfinite_skip_limit", self.nonfinite_skip_limit, 1)
        check.flag("in_order_fit_loaders", self.in_order_fit_loaders)
        check.flag("dry_run", self.dry_run)
        check.flag("inference_mode", self.inference_mode)
        check.flag("record_logged_values", self.record_logged_values)
        check.flag("sync_batchnorm", self.sync_batchnorm)
