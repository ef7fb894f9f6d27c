"""The Accelerator facade: orchestration only.

It holds a precision object (``precision.py``) and a strategy object (``strategy.py``), prepares the user's
objects, and keeps the accumulation window. Formats live in ``checkpoint.py``/``weights.py``, data in ``data.py``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from . import collectives, tools
from .config import DataLoaderConfiguration, ProjectConfiguration
from .data import PreparedDataLoader, SkipView, prepare_data_loader, skip_first_batches
from .environment import settings_from_environment
from .optimizer import AcceleratedOptimizer, AcceleratedScheduler
from .options import AcceleratorOptions
from .precision import make_precision, unwrap_forward
from .state import AcceleratorState, DistributedType, GradientState, forward_to_state as _via_state
from .trackers import build_trackers, check_log_with, find_tracker
from .window import GradientWindow


class Accelerator:
    """Runs your training loop on any device, precision and process count (Hugging Face Accelerate's API).

    Example:
        >>> accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=2)
        >>> model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        >>> for x, y in loader:
        ...     with accelerator.accumulate(model):
        ...         loss = torch.nn.functional.mse_loss(model(x), y)
        ...         accelerator.backward(loss)
        ...         optimizer.step(); scheduler.step(); optimizer.zero_grad()
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        project_dir: str | os.PathLike | None = None,
        project_config: ProjectConfiguration | None = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        cpu: bool = False,
        log_with: Any = None,
        step_scheduler_with_optimizer: bool = True,
        device_placement: bool = True,
        strategy: str = "auto",
        *,
        split_batches: bool | None = None,
        rng_types: list[str] | None = None,
        kwargs_handlers: list[Any] | None = None,
        fsdp_plugin: Any = None,
        deepspeed_plugin: Any = None,
        gradient_accumulation_plugin: Any = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: Any = None,
    ) -> None:
        # Accelerate's further options (kwargs handlers, plugins, ...): validated first, applied below (options.py).
        self._options = AcceleratorOptions(
            kwargs_handlers=kwargs_handlers, fsdp_plugin=fsdp_plugin, deepspeed_plugin=deepspeed_plugin,
            gradient_accumulation_plugin=gradient_accumulation_plugin, dynamo_backend=dynamo_backend,
            dynamo_plugin=dynamo_plugin, rng_types=rng_types, split_batches=split_batches)
        gradient_accumulation_steps = self._options.gradient_accumulation_steps(gradient_accumulation_steps)
        # None: the launcher's setting (`stoker launch --mixed_precision ...`), else "no" and 1.
        mixed_precision, gradient_accumulation_steps, cpu = settings_from_environment(
            mixed_precision, gradient_accumulation_steps, cpu)
        dataloader_config = self._options.dataloader_config(dataloader_config)
        if isinstance(gradient_accumulation_steps, bool) or not isinstance(gradient_accumulation_steps, int):
            raise TypeError(
                f"Accelerator(gradient_accumulation_steps={gradient_accumulation_steps!r}) must be an int, got "
                f"{type(gradient_accumulation_steps).__name__}: pass e.g. gradient_accumulation_steps=4 to update "
                "the weights every 4 micro-batches (1 means no accumulation)."
            )
        if gradient_accumulation_steps < 1:
            raise ValueError(
                f"Accelerator(gradient_accumulation_steps={gradient_accumulation_steps}) must be >= 1: it is the "
                "number of micro-batches per optimizer step (1 means no accumulation)."
            )
        if project_config is not None and not isinstance(project_config, ProjectConfiguration):
            raise TypeError(
                f"Accelerator(project_config=...) must be a ProjectConfiguration, got {type(project_config).__name__}:"
                " pass ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=...)."
            )
        if dataloader_config is not None and not isinstance(dataloader_config, DataLoaderConfiguration):
            raise TypeError(
                f"Accelerator(dataloader_config=...) must be a DataLoaderConfiguration, got "
                f"{type(dataloader_config).__name__}: pass DataLoaderConfiguration(use_stateful_dataloader=..., ...)."
            )
        self.project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        self.dataloader_config = dataloader_config or DataLoaderConfiguration()
        self.strategy = self._options.make_strategy(strategy, cpu=cpu)
        self.precision = make_precision(mixed_precision, self.device)
        self.strategy.setup_precision(self.precision)  # FSDP: its own mixed-precision policy and sharded scaler
        self._options.setup_precision(self.precision)  # GradScalerKwargs, AutocastKwargs
        # Accelerate's state objects, as views of this instance (state.py): no process-wide singleton.
        self.state = AcceleratorState(self.precision.name, strategy=self.strategy,
                                      fsdp_plugin=self._options.fsdp_plugin, dynamo_plugin=self._options.dynamo)
        self.gradient_state = GradientState(accelerator=self)
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.device_placement = device_placement
        self._log_with = check_log_with(log_with)  # a misspelt or missing tracker fails here, not at init
        self._trackers_initialized = False
        self.trackers: list[Any] = []
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[PreparedDataLoader] = []
        self._custom_objects: list[Any] = []
        self._loader_stack: list[PreparedDataLoader] = []
        self._window = GradientWindow(gradient_accumulation_steps, self.precision, self.strategy)

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.strategy.device

    @property
    def num_processes(self) -> int:
        return self.strategy.num_processes

    @property
    def process_index(self) -> int:
        return self.strategy.process_index

    @property
    def local_process_index(self) -> int:
        return self.strategy.local_process_index

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU``/``MULTI_GPU``/... (DDP) or ``FSDP``; also equal to the old strategy class names."""
        return self.state.distributed_type

    @property
    def native_amp(self) -> bool:
        return self.mixed_precision in ("fp16", "bf16")

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def dispatch_batches(self) -> bool | None:
        """Accepted for Accelerate compatibility; stoker's loaders never dispatch (each process loads its share)."""
        return getattr(self.dataloader_config, "dispatch_batches", None)

    @property
    def mixed_precision(self) -> str:
        return self.precision.name

    @property
    def gradient_accumulation_steps(self) -> int:
        return self._window.steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"gradient_accumulation_steps={value!r} must be an int >= 1.")
        self._window.steps = value

    @property
    def sync_gradients(self) -> bool:
        """True on the micro-step whose ``optimizer.step()`` really updates the weights."""
        return self._window.sync_gradients

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped because fp16 gradients overflowed."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    @property
    def step(self) -> int:
        """Optimizer steps applied so far (skipped fp16 steps are not counted)."""
        return self._window.optimizer_steps

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    # -- prepare -----------------------------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | bool | None = None) -> Any:
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
            placements = [self.device_placement if device_placement is None else device_placement] * len(args)
        result = list(args)
        order = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
        for kind in order + (torch.utils.data.DataLoader,):
            for i, obj in enumerate(args):
                if kind is torch.optim.lr_scheduler.LRScheduler:
                    if _is_scheduler(obj):
                        result[i] = self.prepare_scheduler(obj)
                elif isinstance(obj, kind) and not isinstance(obj, (AcceleratedOptimizer,)):
                    if kind is torch.nn.Module:
                        result[i] = self.prepare_model(obj, device_placement=placements[i])
                    elif kind is torch.optim.Optimizer:
                        result[i] = self.prepare_optimizer(obj)
                    else:
                        result[i] = self.prepare_data_loader(obj, device_placement=placements[i])
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Moves ``model`` to the device, runs its forward under autocast, and wraps it for several processes.

        Preparing a model this Accelerator already prepared (the user's module or what ``prepare`` returned)
        returns the same prepared object without registering it again; it only re-arms the precision's autocast
        (which a finished ``Trainer.fit`` removes). The first preparation's placement and wrapping stay.
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"prepare_model expects a torch.nn.Module, got {type(model).__name__}.")
        for prepared in self._models:
            if prepared is model or self.unwrap_model(prepared) is model:
                self.precision.wrap_forward(self.unwrap_model(prepared))
                return prepared
        self.precision.wrap_forward(model)  # replaces the autocast of another precision prepared earlier
        place = self.device_placement if device_placement is None else device_placement
        if evaluation_mode:
            prepared = model.to(self.device) if place else model
        elif place or self.strategy.is_distributed:
            prepared = self.strategy.setup_module(model)
        else:
            prepared = model
        prepared = self._options.compile(prepared)  # dynamo_backend: torch.compile around the wrapped model
        self._models.append(prepared)
        return prepared

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
        """Wraps ``optimizer`` (see :class:`AcceleratedOptimizer`); one prepared twice comes back as it was."""
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        for wrapped in self._optimizers:
            if wrapped.optimizer is optimizer:
                return wrapped
        # FSDP replaces parameters while sharding: an optimizer built before prepare(model) is remapped here.
        wrapped = AcceleratedOptimizer(self.strategy.setup_optimizer(optimizer), self)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wraps ``scheduler`` (see :class:`AcceleratedScheduler`); one prepared twice comes back as it was."""
        if isinstance(scheduler, AcceleratedScheduler):
            return scheduler
        for wrapped in self._schedulers:
            if wrapped.scheduler is scheduler:
                return wrapped
        target = getattr(scheduler, "optimizer", None)
        owners = [o for o in self._optimizers if o.optimizer is target or o is target]
        wrapped = AcceleratedScheduler(scheduler, owners or list(self._optimizers), self,
                                       self.step_scheduler_with_optimizer, self.dataloader_config.split_batches)
        self._schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader,
                            device_placement: bool | None = None) -> PreparedDataLoader:
        place = self.device_placement if device_placement is None else device_placement
        prepared = prepare_data_loader(data_loader, self, self.device if place else None)
        self._dataloaders.append(prepared)
        return prepared

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader that starts ``num_batches`` in, without loading the skipped samples."""
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"skip_first_batches(num_batches={num_batches!r}) must be an int >= 0.")
        return skip_first_batches(dataloader, num_batches)

    # -- the step ----------------------------------------------------------------------------------------------
    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager:
        """One micro-step of an accumulation window; gradient sync across processes only on its last one."""
        return _MicroStep(self, models)

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """No cross-process gradient sync inside (gradients accumulate locally)."""
        with self.strategy.no_sync(model):
            yield

    def backward(self, loss: torch.Tensor, num_items: int | torch.Tensor | None = None, **kwargs: Any) -> None:
        """Backward of ``loss`` for the current window: divided by the window's length and scaled for fp16.

        Args:
            loss: A mean loss of this micro-batch, or a *sum* over items when ``num_items`` is given.
            num_items: Items summed into ``loss``. Gradients are then divided by the total count over the window
                and all processes when the optimizer steps: the exact per-item mean for ragged batches.
            **kwargs: Passed to ``Tensor.backward``.
        """
        if not self._models and not self._optimizers:
            raise RuntimeError(
                "Accelerator.backward() was called before prepare(): pass your model and optimizer through "
                "accelerator.prepare(...) first."
            )
        loss = self._window.loss_for_backward(loss, num_items)
        self.precision.scale_loss(loss).backward(**kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Unscales fp16 gradients of ``optimizer`` (all prepared optimizers by default), once per step."""
        for opt in [optimizer] if optimizer is not None else self._optimizers:
            self._window.finish(opt.optimizer if isinstance(opt, AcceleratedOptimizer) else opt)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float = 2) -> torch.Tensor | None:
        """Unscales, then clips the gradients' total norm; returns the norm before clipping.

        Returns None without touching gradients on micro-steps that do not update weights (the gradients are
        incomplete there).
        """
        if not max_norm > 0:  # also catches NaN
            raise ValueError(
                f"clip_grad_norm_(max_norm={max_norm!r}): max_norm must be > 0; it is the largest total gradient "
                "norm allowed (e.g. 1.0). To measure the norm without clipping pass max_norm=float('inf'); to turn "
                "clipping off, do not call clip_grad_norm_."
            )
        if not self._window.sync_gradients:
            return None
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        """Unscales, then clamps every gradient element to ``[-clip_value, clip_value]``."""
        if not clip_value > 0:  # also catches NaN
            raise ValueError(
                f"clip_grad_value_(clip_value={clip_value!r}): clip_value must be > 0; gradients are clamped to "
                "[-clip_value, clip_value] (e.g. 0.5). To turn clipping off, do not call clip_grad_value_."
            )
        if not self._window.sync_gradients:
            return
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(list(parameters), clip_value)

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """The configured precision's autocast (a no-op for full precision); ``autocast_handler``: an
        ``AutocastKwargs`` for this block only."""
        return self.precision.autocast(**(autocast_handler.to_kwargs() if autocast_handler is not None else {}))

    # -- models and state ---------------------------------------------------------------------------------------
    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = False) -> torch.nn.Module:
        """The user's module without DDP/FSDP/compile wrappers (and without autocast if asked)."""
        model = self.strategy.unwrap(model)
        compiled = getattr(model, "_orig_mod", None)
        if compiled is not None and not keep_torch_compile:
            model = compiled
        model = self.strategy.unwrap(model)
        if not keep_fp32_wrapper:
            unwrap_forward(model)
        return model

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's full state dict (gathered when sharded)."""
        return self.strategy.model_state_dict(self.unwrap_model(model) if unwrap else model)

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """Writes the unwrapped weights (safetensors, sharded past ``max_shard_size``); the main process writes."""
        from .weights import save_model_weights

        state = self.get_state_dict(model)
        if self.is_main_process:
            save_model_weights(state, os.fspath(save_directory), max_shard_size, safe_serialization)
        self.wait_for_everyone()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Adds objects with ``state_dict()``/``load_state_dict()`` to what ``save_state``/``load_state`` keep."""
        bad = [i for i, o in enumerate(objects) if not (callable(getattr(o, "state_dict", None))
                                                         and callable(getattr(o, "load_state_dict", None)))]
        if bad:
            names = ", ".join(f"#{i} ({type(objects[i]).__name__})" for i in bad)
            raise TypeError(
                f"register_for_checkpointing: object(s) {names} lack state_dict()/load_state_dict(); only objects "
                "with both methods can be saved and restored. Give the object both methods (state_dict() returning "
                "a dict, load_state_dict(dict) restoring it) or leave it out."
            )
        self._custom_objects.extend(objects)

    def save_state(self, output_dir: str | os.PathLike | None = None, *, async_save: bool = False,
                   **kwargs: Any) -> str:
        """Saves everything needed to resume (see ``checkpoint.save_state``); returns the folder.

        ``async_save=True`` (one process, no FSDP) copies the state to CPU memory now and writes and commits it on
        a background thread; the next save, ``load_state`` and ``end_training`` wait for it.
        """
        from . import checkpoint

        target = None if output_dir is None else os.fspath(output_dir)
        return checkpoint.save_state(self, target, async_save=async_save, **kwargs)

    def load_state(self, input_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        """Restores what ``save_state`` wrote (the newest complete automatic checkpoint when no folder is given)."""
        from . import checkpoint

        checkpoint.load_state(self, None if input_dir is None else os.fspath(input_dir), **kwargs)

    def _counters_state_dict(self) -> dict[str, int]:
        return {**self._window.state_dict(), "iteration": self.project_configuration.iteration}

    def _load_counters_state_dict(self, state: dict[str, int]) -> None:
        self._window.load_state_dict(state)

    # -- processes --------------------------------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        self.strategy.barrier()

    def broadcast_object(self, obj: Any, from_process: int = 0) -> Any:
        """``obj`` as process ``from_process`` has it, on every process (picklable objects; collective)."""
        return self.strategy.broadcast_object(obj, src=from_process)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. to download or cache), then the others."""
        with self._first(self.is_main_process):
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        with self._first(self.is_local_main_process):
            yield

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> contextlib.AbstractContextManager:
        return collectives.split_between_processes(self.strategy, inputs, apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def gather(self, tensor: Any) -> Any:
        return collectives.gather(self.strategy, tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gathers like :meth:`gather`, dropping the samples repeated to even out the last batches."""
        if use_gather_object or not _has_tensor(input_data):
            parts = self.strategy.all_gather_object(input_data)
            data: Any = [x for part in parts for x in (part if isinstance(part, list) else [part])]
        else:
            data = self.gather(input_data)
        loader = self._loader_stack[-1] if self._loader_stack else None
        if loader is not None and loader.end_of_dataloader and loader.padding_samples:
            drop = loader.padding_samples
            from .operations import apply_to_tensors

            if isinstance(data, list):
                return data[:len(data) - drop]
            return apply_to_tensors(lambda t: t[: t.shape[0] - drop], data)
        return data

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        out = collectives.reduce(self.strategy, tensor, reduction)
        if scale != 1.0:
            from .operations import apply_to_tensors

            out = apply_to_tensors(lambda t: t * scale, out)
        return out

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        return collectives.pad_across_processes(self.strategy, tensor, dim, pad_index, pad_first)

    # -- trackers ----------------------------------------------------------------------------------------------
    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Creates the loggers named by ``log_with`` under ``logging_dir`` (main process only).

        ``config`` is logged as their hyperparameters; ``init_kwargs`` holds constructor arguments per tracker name,
        e.g. ``{"wandb": {"entity": "me", "tags": ["baseline"]}}``. The loggers built here share one version.
        """
        self._trackers_initialized = True
        if not self.is_main_process:
            return
        root = self.logging_dir or self.project_dir or "."
        self.trackers = build_trackers(self._log_with, root, project_name, config, init_kwargs)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker named ``name`` (``"wandb"``, ``"mlflow"``, ``"tensorboard"``, ``"csv"``); ``unwrap=True``
        gives its underlying object (W&B run, ``MlflowClient``, ``SummaryWriter``). On other processes a tracker
        whose methods do nothing."""
        return find_tracker(self.trackers, name, unwrap, is_main_process=self.is_main_process,
                            initialized=self._trackers_initialized)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Logs ``values`` at ``step`` to every tracker (main process only). ``log_kwargs`` is accepted for
        Accelerate compatibility and not used."""
        if self.is_main_process:
            for tracker in self.trackers:
                tracker.log_metrics(values, step=step)

    def end_training(self) -> None:
        """Finishes the trackers and, when the Accelerator created the process group, tears it down.

        First waits for checkpoint work still running in the background: an asynchronous ``save_state`` (its
        error, if it failed, is raised here) and the deletion of folders that saves replaced or rotated out.
        """
        from .background import wait_for_checkpoints

        try:
            wait_for_checkpoints(self)
        finally:
            for tracker in self.trackers:
                tracker.finalize("success")
            self.wait_for_everyone()
            self.strategy.teardown()

    def free_memory(self, *objects: Any, reset_step: bool = True) -> list[None]:
        """Forgets every prepared object and the accumulation window (step counts restart at 0, as in Accelerate;
        ``reset_step=False`` keeps the counters, so a run that prepares new objects continues its step count),
        collects garbage and empties the device cache; returns ``[None] * len(objects)`` (assign it to drop your
        names)."""
        from ..utils.memory import release_memory

        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        if reset_step:
            self._window = GradientWindow(self._window.steps, self.precision, self.strategy)
        return release_memory(*objects)

    clear = free_memory

    # -- Accelerate's wider surface: methods written in tools.py and state.py ------------------------------------
    save = tools.accelerator_save
    on_main_process = _via_state(AcceleratorState.on_main_process)
    on_local_main_process = _via_state(AcceleratorState.on_local_main_process)
    on_last_process = _via_state(AcceleratorState.on_last_process)
    on_process = _via_state(AcceleratorState.on_process)
    on_local_process = _via_state(AcceleratorState.on_local_process)
    set_trigger = _via_state(AcceleratorState.set_trigger)
    check_trigger = _via_state(AcceleratorState.check_trigger)
    trigger_sync_in_backward = staticmethod(tools.trigger_sync_in_backward)
    verify_device_map = staticmethod(tools.verify_device_map)
    join_uneven_inputs = tools.join_uneven_inputs
    register_save_state_pre_hook = tools.register_save_state_pre_hook
    register_load_state_pre_hook = tools.register_load_state_pre_hook
    profile = tools.profile
    __getstate__ = tools.accelerator_getstate

    def __repr__(self) -> str:
        return (f"Accelerator(device={self.device}, mixed_precision={self.mixed_precision!r}, "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}, "
                f"num_processes={self.num_processes}, strategy={type(self.strategy).__name__})")


class _MicroStep:
    """The context manager ``accumulate()`` returns.

    A plain class rather than ``@contextlib.contextmanager``: a generator-based context costs about a microsecond
    more per micro-step, which shows on small models (see ``benchmarks/overhead.py``).
    """

    __slots__ = ("_accelerator", "_models", "_stack")

    def __init__(self, accelerator: Accelerator, models: tuple[torch.nn.Module, ...]) -> None:
        self._accelerator = accelerator
        self._models = models
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> None:
        accelerator = self._accelerator
        stack = accelerator._loader_stack
        window = accelerator._window
        window.begin_micro_step(stack[-1] if stack else None)
        if (window.sync_gradients or not accelerator.strategy.is_distributed or not self._models
                or accelerator._options.sync_each_batch):
            return
        stack = contextlib.ExitStack()
        try:
            for model in self._models:
                stack.enter_context(accelerator.strategy.no_sync(model))
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def __exit__(self, *exc_info: Any) -> bool:
        stack, self._stack = self._stack, None
        return bool(stack.__exit__(*exc_info)) if stack is not None else False


def _is_scheduler(obj: Any) -> bool:
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    return isinstance(obj, (LRScheduler, ReduceLROnPlateau))


def _has_tensor(data: Any) -> bool:
    found = []
    from .operations import apply_to_tensors

    apply_to_tensors(lambda t: found.append(1) or t, data)
    return bool(found)
