"""The Accelerator facade: it builds its collaborators in ``__init__`` and delegates; orchestration only.

It holds a strategy (``distributed/``), a precision object and the accumulation window (``step/``), the registry of
prepared objects (``prepared.py``), the loaders' context (``data/``) and the background checkpoint worker
(``checkpointing/``). It never branches on the precision or the strategy: those objects decide. Accelerate's wider
surface (state views, kwargs handlers, trackers, ...) is a subclass in ``stoker/compat/accelerate``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

from .arguments import check_accumulation_steps
from .checkpointing import checkpoint
from .checkpointing.atomic import aside_path, copy_checkpoint, fresh_aside_folder, put_in_place, remove_checkpoint
from .checkpointing.background import CheckpointIO, sweep_trash
from .checkpointing.contents import CheckpointContents, StateHooks, checkpointable
from .config import DataLoaderConfiguration, ProjectConfiguration, check_configurations
from .data.prepare import LoaderContext, PreparedDataLoader
from .distributed import collectives
from .distributed.strategy import SingleDevice, make_strategy
from .operations import apply_to_tensors, clear_device_cache
from .prepared import Prepared, is_scheduler, placements_for
from .step.optimizer import AcceleratedOptimizer, AcceleratedScheduler
from .step.precision import make_precision, unwrap_forward
from .step.window import GradientWindow, MicroStep


class Accelerator:
    """Runs your training loop on any device, precision and process count.

    ``stoker.Accelerator`` is this class with Accelerate's further arguments and methods (``stoker.compat``).

    Example:
        >>> accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=2)
        >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        >>> for x, y in loader:
        ...     with accelerator.accumulate(model):
        ...         accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        ...         optimizer.step(); optimizer.zero_grad()
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        project_dir: str | os.PathLike | None = None,
        project_config: ProjectConfiguration | None = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        cpu: bool = False,
        step_scheduler_with_optimizer: bool = True,
        device_placement: bool = True,
        strategy: str | SingleDevice = "auto",
    ) -> None:
        steps = check_accumulation_steps(1 if gradient_accumulation_steps is None else gradient_accumulation_steps)
        check_configurations(project_config, dataloader_config)
        self.project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        self.strategy = make_strategy(strategy, cpu=cpu)
        self.precision = make_precision(mixed_precision, self.strategy.device)
        self.strategy.setup_precision(self.precision)  # FSDP: its own mixed-precision policy and sharded scaler
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.device_placement = device_placement
        self.sync_each_batch = False  # True: gradients are synced on every micro-step (less memory, more traffic)
        self.checkpoint_hooks = StateHooks()  # run by save_state/load_state (register_*_state_pre_hook)
        self.loader_context = LoaderContext(self.strategy, dataloader_config or DataLoaderConfiguration())
        self._window = GradientWindow(steps, self.precision, self.strategy)
        self._prepared = Prepared(self.strategy, self.precision, self._window, self.loader_context)
        self._custom_objects: list[Any] = []
        self._checkpoint_io: CheckpointIO | None = CheckpointIO()

    # -- facts --------------------------------------------------------------------------------------------------
    device = property(lambda self: self.strategy.device, doc="The device this process computes on.")
    num_processes = property(lambda self: self.strategy.num_processes)
    process_index = property(lambda self: self.strategy.process_index)
    local_process_index = property(lambda self: self.strategy.local_process_index)
    is_main_process = property(lambda self: self.strategy.process_index == 0)
    is_local_main_process = property(lambda self: self.strategy.local_process_index == 0)
    mixed_precision = property(lambda self: self.precision.name, doc="The precision's canonical name.")
    step = property(lambda self: self._window.optimizer_steps,
                    lambda self, value: setattr(self._window, "optimizer_steps", int(value)),
                    doc="Optimizer steps applied so far (skipped fp16 steps are not counted); settable, as in "
                        "Accelerate (a trial run that must leave no trace puts the count back).")
    sync_gradients = property(lambda self: self._window.sync_gradients,
                              doc="True on the micro-step whose ``optimizer.step()`` really updates the weights.")
    # The DataLoaderConfiguration, held by the loaders' context: replacing it reaches loaders prepared after.
    dataloader_config = property(lambda self: self.loader_context.dataloader_config,
                                 lambda self, value: setattr(self.loader_context, "dataloader_config", value))

    sync_with_dataloader = property(
        lambda self: self._window.sync_with_dataloader,
        lambda self, value: setattr(self._window, "sync_with_dataloader", bool(value)),
        doc="True (the default): the last batch of a prepared loader closes the accumulation window early. False: "
            "every window holds ``gradient_accumulation_steps`` micro-batches, across loader ends (streams, an "
            "epoch whose length is not a multiple of the window); an incomplete last window updates nothing.")

    @property
    def gradient_accumulation_steps(self) -> int:
        return self._window.steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        self._window.steps = check_accumulation_steps(value, argument="accelerator.gradient_accumulation_steps = ...")

    optimizer_step_was_skipped = property(lambda self: self._prepared.optimizer_step_was_skipped(),
                                          doc="True when the last optimizer step was skipped (fp16 overflow).")
    iterating_loaders = property(lambda self: tuple(self.loader_context.stack),
                                 doc="The prepared loaders being iterated right now, innermost last.")
    holds_prepared = property(lambda self: self._prepared.holds_any(),
                              doc="True while objects handed out by ``prepare`` have not been released by "
                                  "``free_memory`` (which then has something to free).")

    # -- prepare ------------------------------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | bool | None = None) -> Any:
        """Prepares models, optimizers, schedulers and data loaders; returns them in the same order.

        Anything else is returned unchanged. Models are prepared first, then optimizers (FSDP remaps them to the
        sharded parameters), then schedulers (which find their optimizer among those prepared), then loaders.
        """
        placements = placements_for(device_placement, len(args), self.device_placement)
        result = list(args)
        for i, obj in enumerate(args):
            if isinstance(obj, torch.nn.Module):
                result[i] = self.prepare_model(obj, device_placement=placements[i])
        for i, obj in enumerate(args):
            if isinstance(obj, torch.optim.Optimizer) and not isinstance(obj, AcceleratedOptimizer):
                result[i] = self.prepare_optimizer(obj)
        for i, obj in enumerate(args):
            if is_scheduler(obj):
                result[i] = self.prepare_scheduler(obj)
        for i, obj in enumerate(args):
            if isinstance(obj, torch.utils.data.DataLoader):
                result[i] = self.prepare_data_loader(obj, device_placement=placements[i])
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False, *, autocast_forward: bool = True) -> torch.nn.Module:
        """Moves ``model`` to the device, runs its forward under autocast, and wraps it for several processes.

        A model prepared before comes back as it was, its autocast re-armed. ``autocast_forward=False``: no autocast
        wrapper, for a caller that enters :meth:`autocast` around its whole step (the Trainer)."""
        place = self.device_placement if device_placement is None else device_placement
        return self._prepared.model(model, place, evaluation_mode, autocast_forward)[0]

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
        """Wraps ``optimizer`` (see :class:`AcceleratedOptimizer`); one prepared twice comes back as it was."""
        return self._prepared.optimizer(optimizer)

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wraps ``scheduler`` (see :class:`AcceleratedScheduler`); one prepared twice comes back as it was."""
        return self._prepared.scheduler(scheduler, self.step_scheduler_with_optimizer)

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader,
                            device_placement: bool | None = None) -> PreparedDataLoader:
        return self._prepared.dataloader(data_loader, self.device_placement if device_placement is None
                                         else device_placement)

    def replace_dataloader(self, old: PreparedDataLoader,
                           data_loader: torch.utils.data.DataLoader) -> PreparedDataLoader:
        """Prepares ``data_loader`` into the checkpointed slot of ``old`` (a loader prepared here), so checkpoints
        keep matching loaders by position (``reload_dataloaders_every_n_epochs``)."""
        return self._prepared.replace_dataloader(old, data_loader, self.device_placement)

    # -- the step -----------------------------------------------------------------------------------------------
    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager:
        """One micro-step of an accumulation window; gradient sync across processes only on its last one."""
        return MicroStep(self._window, self.loader_context.stack, self.strategy, models, self.sync_each_batch)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """No cross-process gradient sync inside (gradients accumulate locally)."""
        return self.strategy.no_sync(model)

    def backward(self, loss: torch.Tensor, num_items: int | torch.Tensor | None = None, **kwargs: Any) -> None:
        """Backward of ``loss`` (a mean; a *sum* of ``num_items`` items) for the current window: divided by the
        window's length (summed: by the items of the window on all processes when the optimizer steps, the exact
        per-item mean), scaled for fp16. ``kwargs`` go to ``Tensor.backward``."""
        if not self._prepared.models and not self._prepared.optimizers:
            raise RuntimeError("Accelerator.backward() was called before prepare(): pass your model and optimizer "
                               "through accelerator.prepare(...) first.")
        self.precision.backward(self._window.loss_for_backward(loss, num_items), **kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Unscales fp16 gradients of ``optimizer`` (all prepared optimizers by default), once per step."""
        for opt in [optimizer] if optimizer is not None else self._prepared.optimizers:
            self._window.finish(opt.optimizer if isinstance(opt, AcceleratedOptimizer) else opt)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float = 2) -> torch.Tensor | None:
        """Unscales, then clips the gradients' total norm; returns the norm before clipping (None, touching
        nothing, on micro-steps that do not update weights: the gradients are incomplete there)."""
        if not max_norm > 0:  # also catches NaN
            raise ValueError(
                f"clip_grad_norm_(max_norm={max_norm!r}): max_norm must be > 0; it is the largest total gradient "
                "norm allowed (e.g. 1.0). To measure the norm without clipping pass max_norm=float('inf'); to turn "
                "clipping off, do not call clip_grad_norm_.")
        if not self._window.sync_gradients:
            return None
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        """Unscales, then clamps every gradient element to ``[-clip_value, clip_value]``."""
        if not clip_value > 0:  # also catches NaN
            raise ValueError(
                f"clip_grad_value_(clip_value={clip_value!r}): clip_value must be > 0; gradients are clamped to "
                "[-clip_value, clip_value] (e.g. 0.5). To turn clipping off, do not call clip_grad_value_.")
        if self._window.sync_gradients:
            self.unscale_gradients()
            torch.nn.utils.clip_grad_value_(list(parameters), clip_value)

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """The configured precision's autocast (a no-op for full precision); ``autocast_handler``: an object with
        ``to_kwargs()`` (Accelerate's ``AutocastKwargs``) for this block only."""
        return self.precision.autocast(**(autocast_handler.to_kwargs() if autocast_handler is not None else {}))

    # -- models and state ---------------------------------------------------------------------------------------
    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = False) -> torch.nn.Module:
        """The user's module without DDP/FSDP/compile wrappers (and without autocast if asked)."""
        model = self._prepared.unwrap(model) if not keep_torch_compile else self.strategy.unwrap(model)
        if not keep_fp32_wrapper:
            unwrap_forward(model)
        return model

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's full state dict (gathered when sharded)."""
        return self.strategy.model_state_dict(self.unwrap_model(model) if unwrap else model)

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """Writes the unwrapped weights (safetensors, sharded past ``max_shard_size``); the main process writes."""
        from .checkpointing.weights import save_model_weights

        state = self.get_state_dict(model)
        if self.is_main_process:
            save_model_weights(state, os.fspath(save_directory), max_shard_size, safe_serialization)
        self.wait_for_everyone()

    def save_model_folder(self, model: torch.nn.Module, target: str | os.PathLike,
                          extra: Callable[[str], None] | None = None) -> None:
        """:meth:`save_model` into ``target``, which appears complete or not at all (written aside, then renamed
        into place; an old ``target`` is deleted in the background); ``extra(folder)`` adds files to it first on
        the main process. Collective."""
        target = os.fspath(target)
        tmp = aside_path(target, "tmp")
        if self.is_main_process:
            fresh_aside_folder(target, self.checkpoint_io)
        self.wait_for_everyone()
        self.save_model(model, tmp)
        if self.is_main_process:
            if extra is not None:
                extra(tmp)
            put_in_place(tmp, target, self.checkpoint_io)
        self.wait_for_everyone()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Adds objects with ``state_dict()``/``load_state_dict()`` to what ``save_state``/``load_state`` keep."""
        self._custom_objects.extend(checkpointable(objects))

    def save_state(self, output_dir: str | os.PathLike | None = None, *, async_save: bool = False,
                   **kwargs: Any) -> str:
        """Saves everything needed to resume (see ``checkpoint.save_state``); returns the folder. ``async_save=True``
        (one process, no FSDP) copies the state to CPU now and writes it on a background thread."""
        target = None if output_dir is None else os.fspath(output_dir)
        return checkpoint.save_state(self._checkpoint_contents(), target, async_save=async_save, **kwargs)

    def load_state(self, input_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        """Restores what ``save_state`` wrote (the newest complete automatic checkpoint when no folder is given)."""
        source = None if input_dir is None else os.fspath(input_dir)
        checkpoint.load_state(self._checkpoint_contents(), source, **kwargs)

    def _checkpoint_contents(self) -> CheckpointContents:
        """What ``save_state``/``load_state`` work on, described for checkpoint I/O (which never sees ``self``)."""
        prepared = self._prepared
        return CheckpointContents(
            models=prepared.models, optimizers=prepared.optimizers, schedulers=prepared.schedulers,
            dataloaders=prepared.dataloaders, custom_objects=self._custom_objects, precision=self.precision,
            window=self._window, strategy=self.strategy, project=self.project_configuration,
            hooks=self.checkpoint_hooks, io=self.checkpoint_io,
            stateful_loaders=self.dataloader_config.use_stateful_dataloader, unwrap=self.unwrap_model)

    # -- checkpoint folders -------------------------------------------------------------------------------------
    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The background writer/deleter of checkpoint folders (made again in a forked child or after a copy,
        where the parent's worker threads do not exist)."""
        if self._checkpoint_io is None or self._checkpoint_io.pid != os.getpid():
            self._checkpoint_io = CheckpointIO()
        return self._checkpoint_io

    def wait_for_checkpoints(self, *, deletions: bool = True) -> None:
        """Waits for the asynchronous ``save_state`` in flight (raising its error here) and, unless
        ``deletions=False``, for the background deletion of replaced or rotated-out checkpoint folders; returns at
        once when there is none."""
        io = self._checkpoint_io
        if io is not None and io.pid == os.getpid():  # a forked child does not wait for its parent's threads
            io.wait() if deletions else io.wait_for_save()

    def copy_checkpoint(self, src: str | os.PathLike, dst: str | os.PathLike) -> None:
        """Makes ``dst`` a complete copy of the checkpoint folder ``src`` (hard links where possible); an old
        ``dst`` is replaced atomically and deleted in the background. Call it on one process."""
        copy_checkpoint(os.fspath(src), os.fspath(dst), self.checkpoint_io)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """Deletes the checkpoint folder ``path`` (moved aside at once, deleted in the background): no
        half-deleted folder is ever left under its name. Call it on one process."""
        remove_checkpoint(os.fspath(path), self.checkpoint_io)

    def after_checkpoint(self, job: Callable[[], Any]) -> None:
        """Runs ``job`` once the background save in flight is committed (now, without one), on the saver thread;
        when that save failed, ``job`` does not run and :meth:`wait_for_checkpoints` raises the save's error."""
        self.checkpoint_io.after_save(job)

    def sweep_checkpoint_trash(self, folder: str | os.PathLike) -> None:
        """Deletes, in the background, what a crash left half-written or half-deleted in ``folder``."""
        sweep_trash(os.fspath(folder), self.checkpoint_io)

    def checkpoints_in_background(self, copy: bool = False) -> contextlib.AbstractContextManager:
        """``save_state`` calls inside finish in the background (with ``copy``: as ``async_save=True``, else only
        their commit) where the run allows it (one process, not FSDP); otherwise they stay synchronous."""
        return self.checkpoint_io.in_background(copy=copy)

    def hold_checkpoint_folder(self, folder: str | os.PathLike) -> None:
        """Marks ``folder`` as written by this run (main process; a lock file naming it): another live run that
        asks for it gets ``FolderInUseError`` naming this one. Automatic checkpoint naming holds its folder by
        itself; given back by :meth:`release_checkpoint_folders` or ``end_training()``, else at exit."""
        if self.is_main_process:
            self.checkpoint_io.locks.acquire(os.fspath(folder))

    def release_checkpoint_folders(self) -> None:
        """Gives back every checkpoint folder this run holds (after waiting for its background work)."""
        if self._checkpoint_io is not None and self._checkpoint_io.pid == os.getpid():
            self.wait_for_checkpoints()
            self._checkpoint_io.locks.release_all()

    # -- processes ----------------------------------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        self.strategy.barrier()

    def broadcast_object(self, obj: Any, from_process: int = 0) -> Any:
        """``obj`` as process ``from_process`` has it, on every process (picklable objects; collective)."""
        return self.strategy.broadcast_object(obj, src=from_process)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def gather(self, tensor: Any) -> Any:
        return collectives.gather(self.strategy, tensor)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        out = collectives.reduce(self.strategy, tensor, reduction)
        return out if scale == 1.0 else apply_to_tensors(lambda t: t * scale, out)

    def end_training(self) -> None:
        """Waits for background checkpoint work (raising a failed save's error), then tears the process group down
        when the Accelerator created it."""
        try:
            self.release_checkpoint_folders()
        finally:
            self.wait_for_everyone()
            self.strategy.teardown()

    def free_memory(self, *objects: Any, reset_step: bool = True) -> list[None]:
        """Forgets every prepared object and the window (``reset_step=False`` keeps the step count), empties the
        device cache; returns ``[None] * len(objects)`` (assign it to drop your names)."""
        self._prepared.clear()
        if reset_step:
            self._window.reset()  # the same object: prepared optimizers and schedulers hold it
        result: list[None] = [None] * len(objects)
        del objects
        clear_device_cache(garbage_collection=True)
        return result

    def __getstate__(self) -> dict[str, Any]:
        """Pickling keeps everything but the background checkpoint worker (threads; made again on use); the
        loaders being iterated are dropped by ``LoaderContext``'s own pickling."""
        return {**self.__dict__, "_checkpoint_io": None}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(device={self.device}, mixed_precision={self.mixed_precision!r}, "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}, "
                f"num_processes={self.num_processes}, strategy={type(self.strategy).__name__})")


def wait_for_checkpoints(accelerator: Accelerator) -> None:
    """``accelerator.wait_for_checkpoints()`` (the name callers used before it was a method)."""
    accelerator.wait_for_checkpoints()
