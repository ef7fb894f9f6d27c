"""`RunOptions`: how a fit may stop early or late, check itself first, and renew its loaders.

Owns the values only (checked here, once); the fit loop (``loops.py``), the sanity check (``evaluation.py``) and
set-up (``setup.py``) read them. ``Trainer(options=RunOptions(...))`` sets them; ``stoker.Trainer`` builds them
from Lightning's names (``min_epochs``, ``num_sanity_val_steps``, ...: ``stoker/compat/lightning/``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import args as check


@dataclass(frozen=True)
class RunOptions:
    """Options of a fit beyond its limits.

    Args:
        min_epochs: A stop request (``should_stop``) waits until this many epochs are done (None: no minimum).
        min_steps: Likewise in applied optimizer steps.
        num_sanity_val_steps: Batches of each val loader to run before training (0: none; None: every batch).
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

    Example:
        >>> Trainer(max_epochs=5, options=RunOptions(min_epochs=2, num_sanity_val_steps=2))  # doctest: +SKIP
    """

    min_epochs: int | None = None
    min_steps: int | None = None
    num_sanity_val_steps: int | None = 0
    reload_dataloaders_every_n_epochs: int = 0
    use_distributed_sampler: bool = True
    nonfinite_skip_limit: int = 100
    in_order_fit_loaders: bool = False
    dry_run: bool = False
    inference_mode: bool = False
    record_logged_values: bool = True

    def __post_init__(self) -> None:
        check.optional_int("min_epochs", self.min_epochs, 0)
        check.optional_int("min_steps", self.min_steps, 0)
        check.optional_int("num_sanity_val_steps", self.num_sanity_val_steps, 0)
        check.optional_int("reload_dataloaders_every_n_epochs", self.reload_dataloaders_every_n_epochs, 0)
        check.flag("use_distributed_sampler", self.use_distributed_sampler)
        check.optional_int("nonfinite_skip_limit", self.nonfinite_skip_limit, 1)
        check.flag("in_order_fit_loaders", self.in_order_fit_loaders)
        check.flag("dry_run", self.dry_run)
        check.flag("inference_mode", self.inference_mode)
        check.flag("record_logged_values", self.record_logged_values)
