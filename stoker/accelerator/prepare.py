"""The Accelerator's ``prepare`` family, written as functions of the facade (its methods of the same names).

Owns the order of preparation (models, then optimizers, then schedulers, which find their optimizer among those
prepared, then loaders), "prepared twice comes back as it was", and which collaborators each wrapper gets: an
optimizer the window and the precision, a scheduler the window and the strategy, a loader the loader context.
"""

from __future__ import annotations

from typing import Any

import torch

from .data import PreparedDataLoader, prepare_data_loader as _prepare_loader, skip_first_batches as _skip
from .optimizer import AcceleratedOptimizer, AcceleratedScheduler

# The Accelerator these functions serve. Not imported: it imports this module (that would be a circle).
Facade = Any


def _is_scheduler(obj: Any) -> bool:
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    return isinstance(obj, (LRScheduler, ReduceLROnPlateau))


def prepare(accelerator: Facade, *args: Any, device_placement: list[bool] | bool | None = None) -> Any:
    """Prepares models, optimizers, schedulers and data loaders; returns them in the same order.

    Anything else is returned unchanged. Models are prepared first, then optimizers, then schedulers (which
    find their optimizer among those prepared), then loaders.
    """
    if isinstance(device_placement, (list, tuple)):
        if len(device_placement) != len(args):
            raise ValueError(
                f"prepare got {len(args)} objects but device_placement has {len(device_placement)} entries: "
                "pass one bool per object, or a single bool for all."
            )
        placements = list(device_placement)
    else:
        placements = [accelerator.device_placement if device_placement is None else device_placement] * len(args)
    result = list(args)
    order = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
    for kind in order + (torch.utils.data.DataLoader,):
        for i, obj in enumerate(args):
            if kind is torch.optim.lr_scheduler.LRScheduler:
                if _is_scheduler(obj):
                    result[i] = accelerator.prepare_scheduler(obj)
            elif isinstance(obj, kind) and not isinstance(obj, (AcceleratedOptimizer,)):
                if kind is torch.nn.Module:
                    result[i] = accelerator.prepare_model(obj, device_placement=placements[i])
                elif kind is torch.optim.Optimizer:
                    result[i] = accelerator.prepare_optimizer(obj)
                else:
                    result[i] = accelerator.prepare_data_loader(obj, device_placement=placements[i])
    return result[0] if len(result) == 1 else tuple(result)


def prepare_model(accelerator: Facade, model: torch.nn.Module, device_placement: bool | None = None,
                  evaluation_mode: bool = False, *, autocast_forward: bool = True) -> torch.nn.Module:
    """Moves ``model`` to the device, runs its forward under autocast, and wraps it for several processes.

    ``autocast_forward=False`` leaves ``forward`` as it is (and removes an autocast wrapper an earlier preparation
    put there): for a caller that enters :meth:`Accelerator.autocast` around its whole step itself (the Trainer).

    Preparing a model this Accelerator already prepared (the user's module or what ``prepare`` returned)
    returns the same prepared object without registering it again; it only re-arms the precision's autocast
    (which a finished ``Trainer.fit`` removes). The first preparation's placement and wrapping stay.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"prepare_model expects a torch.nn.Module, got {type(model).__name__}.")
    for prepared in accelerator._models:
        if prepared is model or accelerator.unwrap_model(prepared) is model:
            accelerator.precision.wrap_forward(accelerator.unwrap_model(prepared), autocast_forward)
            return prepared
    accelerator.precision.wrap_forward(model, autocast_forward)  # replaces another precision's wrapper
    place = accelerator.device_placement if device_placement is None else device_placement
    if evaluation_mode:
        prepared = model.to(accelerator.device) if place else model
    elif place or accelerator.strategy.is_distributed:
        prepared = accelerator.strategy.setup_module(model)
    else:
        prepared = model
    prepared = accelerator._options.compile(prepared)  # dynamo_backend: torch.compile around the wrapped model
    accelerator._models.append(prepared)
    return prepared


def prepare_optimizer(accelerator: Facade, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
    """Wraps ``optimizer`` (see :class:`AcceleratedOptimizer`); one prepared twice comes back as it was."""
    if isinstance(optimizer, AcceleratedOptimizer):
        return optimizer
    for wrapped in accelerator._optimizers:
        if wrapped.optimizer is optimizer:
            return wrapped
    # FSDP replaces parameters while sharding: an optimizer built before prepare(model) is remapped here.
    wrapped = AcceleratedOptimizer(accelerator.strategy.setup_optimizer(optimizer), accelerator._window, accelerator.precision)
    accelerator._optimizers.append(wrapped)
    return wrapped


def prepare_scheduler(accelerator: Facade, scheduler: Any) -> AcceleratedScheduler:
    """Wraps ``scheduler`` (see :class:`AcceleratedScheduler`); one prepared twice comes back as it was."""
    if isinstance(scheduler, AcceleratedScheduler):
        return scheduler
    for wrapped in accelerator._schedulers:
        if wrapped.scheduler is scheduler:
            return wrapped
    target = getattr(scheduler, "optimizer", None)
    owners = [o for o in accelerator._optimizers if o.optimizer is target or o is target]
    wrapped = AcceleratedScheduler(scheduler, owners or list(accelerator._optimizers), accelerator._window, accelerator.strategy,
                                   accelerator.step_scheduler_with_optimizer, accelerator.dataloader_config.split_batches)
    accelerator._schedulers.append(wrapped)
    return wrapped


def prepare_data_loader(accelerator: Facade, data_loader: torch.utils.data.DataLoader,
                        device_placement: bool | None = None) -> PreparedDataLoader:
    place = accelerator.device_placement if device_placement is None else device_placement
    prepared = _prepare_loader(data_loader, accelerator._loaders, accelerator.device if place else None)
    accelerator._dataloaders.append(prepared)
    return prepared


def replace_dataloader(accelerator: Facade, old: PreparedDataLoader,
                       data_loader: torch.utils.data.DataLoader) -> PreparedDataLoader:
    """Prepares ``data_loader`` in the place of ``old`` (a loader this Accelerator prepared): it takes ``old``'s
    slot among the checkpointed loaders, so ``save_state``/``load_state`` keep matching loaders by position
    (the Trainer's ``reload_dataloaders_every_n_epochs``). Returns the prepared loader."""
    slots = [i for i, item in enumerate(accelerator._dataloaders) if item is old]
    if not slots:
        raise ValueError("Accelerator.replace_dataloader(old, new): old is not a loader this Accelerator prepared "
                         "(or it was freed since). Pass the prepared loader that prepare() returned, or prepare the "
                         "new loader with prepare_data_loader(new).")
    prepared = prepare_data_loader(accelerator, data_loader)
    accelerator._dataloaders.pop()  # prepare_data_loader appended it: it takes old's slot instead
    for i in slots:
        accelerator._dataloaders[i] = prepared
    return prepared


def skip_first_batches(accelerator: Facade, dataloader: Any, num_batches: int = 0) -> Any:
    """A loader that starts ``num_batches`` in, without loading the skipped samples."""
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(f"skip_first_batches(num_batches={num_batches!r}) must be an int >= 0.")
    return _skip(dataloader, num_batches)
