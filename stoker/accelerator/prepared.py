"""The registry of prepared objects: what ``prepare`` made of a user's models, optimizers, schedulers and loaders.

Owns the four lists (in preparation order: ``save_state``/``load_state`` match objects by position), "prepared
twice comes back as it was", and which collaborators each wrapper gets: an optimizer the window and the precision,
a scheduler the window and the strategy, a loader the loader context. The order *across* kinds (models first, so
that FSDP has sharded before optimizers are remapped) is the Accelerator's ``prepare``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .empty_init import meta_tensor_names
from .data.prepare import LoaderContext, PreparedDataLoader, prepare_data_loader
from .step.optimizer import AcceleratedOptimizer, AcceleratedScheduler

if TYPE_CHECKING:
    from .distributed.ddp import SingleDevice
    from .step.precision import Precision
    from .step.window import GradientWindow


class Prepared:
    """The prepared objects of one Accelerator and the collaborators that preparing needs.

    Args:
        strategy: Places and wraps models (DDP, FSDP) and remaps optimizers.
        precision: Wraps a model's forward (autocast, true half precision); steps optimizers.
        window: The accumulation window that optimizer and scheduler wrappers consult.
        loaders: What prepared loaders need (strategy, ``DataLoaderConfiguration``, the loaders being iterated).
    """

    def __init__(self, strategy: SingleDevice, precision: Precision, window: GradientWindow,
                 loaders: LoaderContext) -> None:
        self.strategy = strategy
        self.precision = precision
        self.window = window
        self.loaders = loaders
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[AcceleratedOptimizer] = []
        self.schedulers: list[AcceleratedScheduler] = []
        self.dataloaders: list[PreparedDataLoader] = []

    def model(self, model: torch.nn.Module, place: bool, evaluation_mode: bool, autocast_forward: bool) -> \
            tuple[torch.nn.Module, bool]:
        """``(prepared model, new)``: ``model`` placed, its forward wrapped and, to train on several processes,
        wrapped by the strategy; an already prepared model comes back with only its forward wrapper renewed."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"prepare_model expects a torch.nn.Module, got {type(model).__name__}.")
        for prepared in self.models:
            user_module = self.unwrap(prepared)
            if prepared is model or user_module is model:
                self.precision.wrap_forward(user_module, autocast_forward)
                return prepared, False
        _refuse_meta(model)
        self.precision.wrap_forward(model, autocast_forward)  # replaces another precision's wrapper
        if evaluation_mode:
            prepared = model.to(self.strategy.device) if place else model
        elif place or self.strategy.is_distributed:
            prepared = self.strategy.setup_module(model)
        else:
            prepared = model
        self.models.append(prepared)
        return prepared, True

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside DDP/FSDP and ``torch.compile`` wrappers."""
        model = self.strategy.unwrap(model)
        return self.strategy.unwrap(getattr(model, "_orig_mod", model))  # _orig_mod: torch.compile's wrapper

    def optimizer(self, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
        """Wraps ``optimizer`` (see :class:`AcceleratedOptimizer`); one prepared twice comes back as it was."""
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        for wrapped in self.optimizers:
            if wrapped.optimizer is optimizer:
                return wrapped
        # FSDP replaces parameters while sharding: an optimizer built before prepare(model) is remapped here.
        wrapped = AcceleratedOptimizer(self.strategy.setup_optimizer(optimizer), self.window, self.precision)
        self.optimizers.append(wrapped)
        return wrapped

    def scheduler(self, scheduler: Any, step_with_optimizer: bool) -> AcceleratedScheduler:
        """Wraps ``scheduler`` (see :class:`AcceleratedScheduler`); one prepared twice comes back as it was."""
        if isinstance(scheduler, AcceleratedScheduler):
            return scheduler
        for wrapped in self.schedulers:
            if wrapped.scheduler is scheduler:
                return wrapped
        target = getattr(scheduler, "optimizer", None)
        owners = [o for o in self.optimizers if o.optimizer is target or o is target]
        wrapped = AcceleratedScheduler(scheduler, owners or list(self.optimizers), self.window, self.strategy,
                                       step_with_optimizer, self.loaders.dataloader_config.split_batches)
        self.schedulers.append(wrapped)
        return wrapped

    def dataloader(self, data_loader: torch.utils.data.DataLoader, place: bool) -> PreparedDataLoader:
        prepared = prepare_data_loader(data_loader, self.loaders, self.strategy.device if place else None)
        self.dataloaders.append(prepared)
        return prepared

    def replace_dataloader(self, old: PreparedDataLoader, data_loader: torch.utils.data.DataLoader,
                           place: bool) -> PreparedDataLoader:
        """Prepares ``data_loader`` into ``old``'s slot among the checkpointed loaders."""
        slots = [i for i, item in enumerate(self.dataloaders) if item is old]
        if not slots:
            raise ValueError("Accelerator.replace_dataloader(old, new): old is not a loader this Accelerator "
                             "prepared (or it was freed since). Pass the prepared loader that prepare() returned, or "
                             "prepare the new loader with prepare_data_loader(new).")
        prepared = prepare_data_loader(data_loader, self.loaders, self.strategy.device if place else None)
        for i in slots:
            self.dataloaders[i] = prepared
        return prepared

    def optimizer_step_was_skipped(self) -> bool:
        for opt in self.optimizers:  # a loop, not any(<generator>): the Trainer reads this every step
            if opt.step_was_skipped:
                return True
        return False

    def holds_any(self) -> bool:
        return bool(self.models or self.optimizers or self.schedulers or self.dataloaders)

    def clear(self) -> None:
        """Forgets every prepared object (``free_memory``)."""
        self.models.clear()
        self.optimizers.clear()
        self.schedulers.clear()
        self.dataloaders.clear()


def placements_for(device_placement: list[bool] | bool | None, count: int, default: bool) -> list[bool]:
    """``prepare(..., device_placement=...)`` for each of ``count`` objects."""
    if not isinstance(device_placement, (list, tuple)):
        return [default if device_placement is None else device_placement] * count
    if len(device_placement) != count:
        raise ValueError(f"prepare got {count} objects but device_placement has {len(device_placement)} "
                         "entries: pass one bool per object, or a single bool for all.")
    return list(device_placement)


def is_scheduler(obj: Any) -> bool:
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    return isinstance(obj, (LRScheduler, ReduceLROnPlateau))


def _refuse_meta(model: torch.nn.Module) -> None:
    """A model built under ``init_empty_weights()`` and not loaded yet holds no numbers: refused with the way out."""
    empty = meta_tensor_names(model)
    if empty:
        shown = ", ".join(repr(n) for n in empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        raise ValueError(
            f"Accelerator.prepare({type(model).__name__}): {len(empty)} of its tensors are on the meta device ({shown}),"
            " e.g. built under init_empty_weights(): they hold no data to train or move. Load the weights first: "
            "model.load_state_dict(state_dict, assign=True) (the loaded tensors become the parameters), or "
            "model.to_empty(device='cpu') and then model.load_state_dict(state_dict)."
        )
