"""`StochasticWeightAveraging`: average the weights of the last epochs (torch.optim.swa_utils' recipe in a fit).

Owns: when averaging starts, the switch of the learning-rate schedule to ``SWALR``, the running average (kept as
tensors beside the model, on ``device``), putting the average into the module when training ends and recomputing
BatchNorm statistics for it, and the state that makes all of this resume exactly. The averaging arithmetic and the
schedule are ``torch.optim.swa_utils``' (``get_swa_multi_avg_fn``, ``SWALR``).

The recipe, as ``torch.optim.swa_utils`` documents it, with ``s`` the first averaging epoch::

    for epoch in range(max_epochs):
        train one epoch                  # from epoch s on, with SWALR's learning rates
        if epoch >= s: average.update(model weights); swa_scheduler.step()
    model weights = average; update_bn(train loader, model)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from stoker.callbacks.base import Callback, TrainerView
from stoker.callbacks.scheduler_config import LRSchedulerConfig
from stoker.utilities.rank_zero import rank_zero_info

__all__ = ["StochasticWeightAveraging"]

_STRATEGIES = ("cos", "linear")


class StochasticWeightAveraging(Callback):
    """Stochastic Weight Averaging (Izmailov et al., 2018): the module ends ``fit`` with the average of the weights
    reached at the end of each epoch from ``swa_epoch_start`` on.

    From the first averaging epoch, the learning rate of every param group is annealed to ``swa_lrs`` over
    ``annealing_epochs`` epochs by ``torch.optim.swa_utils.SWALR``, which replaces the module's scheduler (stepped
    once per epoch). After each completed training epoch from then on, the weights are added to a running average
    (an equal-weight mean, or ``avg_fn``). When training ends the average is copied into the module's parameters and,
    if the module has BatchNorm layers, their statistics are recomputed with one pass over the training loader (as
    ``torch.optim.swa_utils.update_bn``; in several processes each uses its shard, then the statistics are
    averaged). The average, its count and the SWALR state are saved in checkpoints, so a resumed run ends with the
    same weights as an uninterrupted one.

    Differences from Lightning's callback, on purpose: the average holds the weights at the *end* of each averaging
    epoch, the last epoch's included (torch's recipe; Lightning averages the weights at the start of those epochs,
    so the last epoch's result is left out), and BatchNorm statistics come from a separate pass after training
    (Lightning runs one extra training epoch without gradients). Checkpoints written during ``fit`` hold the
    training weights (and the average in this callback's state); save after ``fit`` to keep the averaged model.

    Args:
        swa_lrs: The learning rate to anneal to: one number for every param group, or a list with one per group.
        swa_epoch_start: An int n >= 1: averaging starts with the n-th epoch (epoch index n - 1); a float in [0, 1]:
            with epoch index ``int(max_epochs * swa_epoch_start) - 1`` (at least 0), as in Lightning.
        annealing_epochs: Epochs over which the learning rate moves to ``swa_lrs`` (0: at once).
        annealing_strategy: ``"cos"`` or ``"linear"``.
        avg_fn: ``avg_fn(averaged, current, num_averaged) -> new averaged`` for each tensor, or None (equal weights).
        device: Where the average lives (default ``"cpu"``: no accelerator memory); None: beside the parameters.
        forward_fn: ``forward_fn(module, batch)`` runs the forward pass of the BatchNorm update; default: like
            ``update_bn``, ``module(batch[0])`` for a list/tuple batch, ``module(**batch)`` for a dict, else
            ``module(batch)``.

    Example:
        >>> swa = StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=0.75, annealing_epochs=2)
        >>> trainer = Trainer(max_epochs=20, callbacks=[swa])   # doctest: +SKIP
        >>> trainer.fit(module, train_loader, val_loader)        # doctest: +SKIP
        >>> swa.n_averaged                                       # doctest: +SKIP
        6
    """

    def __init__(self, swa_lrs: float | list[float], swa_epoch_start: int | float = 0.8, annealing_epochs: int = 10,
                 annealing_strategy: str = "cos", avg_fn: Callable[..., torch.Tensor] | None = None,
                 device: torch.device | str | None = "cpu",
                 forward_fn: Callable[[nn.Module, Any], Any] | None = None) -> None:
        _check_arguments(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device, forward_fn)
        self.swa_lrs = [float(v) for v in swa_lrs] if isinstance(swa_lrs, (list, tuple)) else float(swa_lrs)
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self.avg_fn = avg_fn
        self.device = None if device is None else torch.device(device)
        self.forward_fn = forward_fn or _default_forward
        self.n_averaged = 0
        self.start_epoch: int | None = None  # 0-based, decided at fit start
        self._average: dict[str, torch.Tensor] | None = None
        self._latest_update_epoch = -1
        self._swa_scheduler: Any = None
        self._scheduler_state: dict[str, Any] | None = None

    # -- fit boundaries -------------------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage == "fit" and trainer.accelerator.strategy.shards_parameters:
            raise ValueError("StochasticWeightAveraging does not support sharded parameters (FSDP): each process "
                             "holds only a shard of every weight. Use strategy='ddp' or drop the callback.")

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        if len(trainer.optimizers) != 1:
            raise ValueError(f"StochasticWeightAveraging works with one optimizer; configure_optimizers returned "
                             f"{len(trainer.optimizers)}.")
        if len(trainer.lr_scheduler_configs) > 1:
            raise ValueError(f"StochasticWeightAveraging replaces the learning-rate scheduler, so it supports at most "
                             f"one; configure_optimizers returned {len(trainer.lr_scheduler_configs)}.")
        self.start_epoch = self._first_epoch(trainer)
        if self.forward_fn is _default_forward and _has_batch_norm(module) and _lacks_forward(module):
            raise ValueError(
                f"StochasticWeightAveraging recomputes BatchNorm statistics after training with module(batch[0]) "
                f"(as torch.optim.swa_utils.update_bn does), but {type(module).__name__} defines no forward(). "
                f"Define forward, or pass forward_fn=lambda module, batch: ... (e.g. module.net(batch[0]))."
            )
        self._swa_scheduler = None  # configure_optimizers ran again: the new scheduler config needs the switch

    def _first_epoch(self, trainer: TrainerView) -> int:
        max_epochs = None if trainer.max_epochs == -1 else trainer.max_epochs  # -1: Lightning's "no limit"
        if max_epochs is None and trainer.max_steps in (None, -1):  # neither limit: the Trainer runs one epoch
            max_epochs = 1
        if isinstance(self.swa_epoch_start, float):
            if max_epochs is None:
                raise ValueError(f"StochasticWeightAveraging(swa_epoch_start={self.swa_epoch_start}) is a fraction of "
                                 "max_epochs, but the Trainer has no max_epochs. Give an int epoch instead.")
            start = max(int(max_epochs * self.swa_epoch_start) - 1, 0)
        else:
            start = self.swa_epoch_start - 1
        if max_epochs is not None and start >= max_epochs:
            warnings.warn(f"StochasticWeightAveraging starts at epoch index {start}, but the Trainer stops after "
                          f"{max_epochs} epochs: no weights will be averaged.", RuntimeWarning, stacklevel=3)
        return start

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        if trainer.current_epoch >= self.start_epoch:  # a resumed run already inside the averaging epochs
            self._switch_scheduler(trainer)

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        if trainer.current_epoch >= self.start_epoch and self._swa_scheduler is None:
            self._switch_scheduler(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        epoch = trainer.current_epoch
        if epoch >= self.start_epoch and epoch > self._latest_update_epoch and trainer.epoch_finished:
            self._update(module)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        if not self.n_averaged:
            return
        self._transfer(module)
        self._update_batch_norm(trainer, module)

    # -- the schedule ---------------------------------------------------------------------------------------------
    def _switch_scheduler(self, trainer: TrainerView) -> None:
        from torch.optim.swa_utils import SWALR

        optimizer = trainer.optimizers[0]  # the user's optimizer (trainer.optimizers are those)
        groups = len(optimizer.param_groups)
        lrs = self.swa_lrs if isinstance(self.swa_lrs, list) else [self.swa_lrs] * groups
        if len(lrs) != groups:
            raise ValueError(f"StochasticWeightAveraging(swa_lrs={self.swa_lrs!r}) has {len(lrs)} learning rates for "
                             f"an optimizer with {groups} param groups; give one number, or one per group.")
        for lr, group in zip(lrs, optimizer.param_groups):
            group["initial_lr"] = lr  # the schedule's base from here on (SWALR's base_lrs), as in Lightning
        scheduler = SWALR(optimizer, swa_lr=lrs, anneal_epochs=self.annealing_epochs,
                          anneal_strategy=self.annealing_strategy)
        if self._scheduler_state is not None:
            scheduler.load_state_dict(self._scheduler_state)
            self._scheduler_state = None
            # The optimizer did step before this state was saved; without this mark torch warns that the
            # scheduler steps before the optimizer when a run resumes at an epoch's end.
            optimizer._opt_called = True
        configs = trainer.lr_scheduler_configs
        if configs:
            # Changed in place: the Trainer's step-interval list holds this same object and now skips it.
            config = configs[0]
            _announce_swap(trainer, config, scheduler)
            config.scheduler, config.interval, config.frequency = scheduler, "epoch", 1
            config.monitor, config.reduce_on_plateau = None, False
        else:
            configs.append(LRSchedulerConfig(scheduler))
        self._swa_scheduler = scheduler

    # -- the average ----------------------------------------------------------------------------------------------
    def _update(self, module: nn.Module) -> None:
        """Adds the module's weights to the average, with the arithmetic of ``AveragedModel.update_parameters``."""
        from torch.optim.swa_utils import get_swa_avg_fn, get_swa_multi_avg_fn

        params = dict(module.named_parameters())
        if self._average is None or self.n_averaged == 0:
            self._average = {name: p.detach().to(self.device or p.device, copy=True) for name, p in params.items()}
            self.n_averaged = 1
            return
        groups: dict[tuple[torch.device, torch.dtype], list[str]] = {}
        for name, value in self._average.items():
            groups.setdefault((value.device, value.dtype), []).append(name)
        with torch.no_grad():
            for (device, _), names in groups.items():
                count = torch.tensor(self.n_averaged, dtype=torch.long, device=device)
                averaged = [self._average[n] for n in names]
                current = [params[n].detach().to(device) for n in names]
                if self.avg_fn is None and device.type in ("cuda", "xpu"):  # where torch has foreach kernels
                    get_swa_multi_avg_fn()(averaged, current, count)
                    continue
                fn = self.avg_fn or get_swa_avg_fn()
                for avg, cur in zip(averaged, current):
                    avg.copy_(fn(avg, cur, count))
        self.n_averaged += 1

    def _transfer(self, module: nn.Module) -> None:
        params = dict(module.named_parameters())
        missing = sorted(set(self._average) ^ set(params))
        if missing:
            raise RuntimeError(f"StochasticWeightAveraging: the module's parameters changed during fit ({missing[:5]} "
                               "appear on one side only); the average cannot be put back.")
        with torch.no_grad():
            for name, value in self._average.items():
                params[name].copy_(value.to(params[name].device))

    def _update_batch_norm(self, trainer: TrainerView, module: nn.Module) -> None:
        norms = [m for m in module.modules() if isinstance(m, _BatchNorm)]
        run = trainer.fit_run  # the prepared loader: its position can be saved and put back
        loader = run.train_loader if run is not None else None
        if not norms or loader is None:
            return
        momenta = {m: m.momentum for m in norms}
        modes = [(m, m.training) for m in module.modules()]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the pass, as update_bn does
        accelerator = trainer.accelerator
        position = loader.state_dict()
        module.train()
        try:
            # A fresh epoch of the training data, then the loader's position is put back (a later resume needs it).
            loader.load_state_dict({key: value for key, value in position.items() if key != "loader"}
                                   | {"batches_yielded": 0})
            autocast = accelerator.autocast() if accelerator.mixed_precision != "no" else contextlib.nullcontext()
            with torch.no_grad(), autocast:
                for batch in loader:
                    self.forward_fn(module, batch)
        finally:
            loader.load_state_dict(position)
            for m, mode in modes:
                m.training = mode
            for m, momentum in momenta.items():
                m.momentum = momentum
        if accelerator.num_processes > 1:  # each process saw its shard: agree on the mean statistics
            for m in norms:
                for buffer in (m.running_mean, m.running_var):
                    if buffer is not None:
                        buffer.copy_(accelerator.reduce(buffer.detach().clone(), "mean"))

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        scheduler = self._swa_scheduler.state_dict() if self._swa_scheduler is not None else self._scheduler_state
        return {"n_averaged": self.n_averaged, "latest_update_epoch": self._latest_update_epoch,
                "scheduler_state": scheduler, "average": dict(self._average or {})}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.n_averaged = int(state_dict["n_averaged"])
        self._latest_update_epoch = int(state_dict["latest_update_epoch"])
        self._scheduler_state = state_dict.get("scheduler_state")
        average = state_dict.get("average") or {}
        self._average = {name: t.to(self.device or t.device) for name, t in average.items()} or None


_BatchNorm = nn.modules.batchnorm._BatchNorm


def _has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, _BatchNorm) for m in module.modules())


def _lacks_forward(module: nn.Module) -> bool:
    return "forward" not in vars(module) and getattr(type(module), "forward", None) is nn.Module.forward


def _default_forward(module: nn.Module, batch: Any) -> Any:
    if isinstance(batch, (list, tuple)):
        return module(batch[0])
    if isinstance(batch, dict):
        return module(**batch)
    return module(batch)


def _check_arguments(swa_lrs: Any, start: Any, annealing_epochs: Any, strategy: Any, avg_fn: Any, device: Any,
                     forward_fn: Any) -> None:
    def positive(v: Any) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0

    lrs = swa_lrs if isinstance(swa_lrs, (list, tuple)) else [swa_lrs]
    if not lrs or not all(positive(v) for v in lrs):
        raise ValueError(f"StochasticWeightAveraging(swa_lrs={swa_lrs!r}) must be a number > 0, or a list of them "
                         "(one per param group).")
    int_start = isinstance(start, int) and not isinstance(start, bool)
    if not ((int_start and start >= 1) or (isinstance(start, float) and 0.0 <= start <= 1.0)):
        raise ValueError("swa_epoch_start should be a >0 integer or a float between 0 and 1. "
                         f"(StochasticWeightAveraging(swa_epoch_start={start!r}) must be an int >= 1, the epoch "
                         "counted from 1, or a float in [0, 1], a fraction of max_epochs.)")
    if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 0:
        raise ValueError(f"StochasticWeightAveraging(annealing_epochs={annealing_epochs!r}) must be an int >= 0.")
    if strategy not in _STRATEGIES:
        raise ValueError(f"StochasticWeightAveraging(annealing_strategy={strategy!r}) is not a strategy. Expected "
                         "'cos' or 'linear'.")
    for name, fn in (("avg_fn", avg_fn), ("forward_fn", forward_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"StochasticWeightAveraging({name}={fn!r}) must be callable, or None.")
    if device is not None and not isinstance(device, (str, torch.device)):
        raise TypeError(f"StochasticWeightAveraging(device={device!r}) must be a torch.device, a string such as "
                        "'cpu', or None.")


def _announce_swap(trainer: TrainerView, config: LRSchedulerConfig, swa_scheduler: Any) -> None:
    """Says that the user's scheduler is replaced, and warns when it stepped more often than once an epoch: from
    the averaging epochs on, a per-step schedule silently becomes a per-epoch one."""
    if not trainer.is_global_zero:
        return
    old = config.scheduler
    name, new = type(old).__name__, type(swa_scheduler).__name__
    if config.interval != "epoch" or config.frequency != 1:
        warnings.warn(f"StochasticWeightAveraging replaces {name} (interval={config.interval!r}, "
                      f"frequency={config.frequency}) by {new}, which steps once per epoch: SWA is currently only "
                      "supported every epoch, so the per-step schedule ends where averaging starts.",
                      UserWarning, stacklevel=2)
    rank_zero_info(f"Swapping scheduler `{name}` for `{new}` (StochasticWeightAveraging).")

