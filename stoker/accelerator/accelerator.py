"""The Accelerator facade: orchestration only.

It holds a precision object (``precision.py``) and a strategy object (``strategy.py``), prepares the user's
objects (``prepare.py``), and keeps the accumulation window (``window.py``). Checkpoints are written and read by
``checkpointing/`` from a description this facade builds (``_checkpoint_contents``); data in ``data.py``; process
and tracker methods in ``processes.py``; Accelerate's wider surface in ``tools.py`` and ``state.py``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from . import collectives, prepare as _prepare, processes, tools
from .arguments import check_accumulation_steps
from .checkpointing import checkpoint
from .checkpointing.background import checkpoint_io, wait_for_checkpoints as _wait_for_checkpoints
from .checkpointing.contents import CheckpointContents, checkpointable
from .config import DataLoaderConfiguration, ProjectConfiguration
from .data import LoaderContext, PreparedDataLoader, SkipView, prepare_data_loader, skip_first_batches
from .environment import settings_from_environment
from .optimizer import AcceleratedOptimizer, AcceleratedScheduler
from .options import AcceleratorOptions, check_arguments
from .precision import make_precision, unwrap_forward
from .state import AcceleratorState, DistributedType, GradientState, forward_to_state as _via_state
from .trackers import check_log_with
from .window import GradientWindow, MicroStep


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
        check_arguments(gradient_accumulation_steps, project_config, dataloader_config)
        self.project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        dataloader_config = dataloader_config or DataLoaderConfiguration()
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
        self._loaders = LoaderContext(self.strategy, dataloader_config, self._options.epoch_started)
        self._window = GradientWindow(gradient_accumulation_steps, self.precision, self.strategy)

    # The DataLoaderConfiguration, held by the loaders' context: replacing it reaches loaders prepared after.
    dataloader_config = property(lambda self: self._loaders.dataloader_config,
                                 lambda self, value: setattr(self._loaders, "dataloader_config", value))
    _loader_stack = property(lambda self: self._loaders.stack, doc="The loaders being iterated, innermost last.")

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

    native_amp = property(lambda self: self.mixed_precision in ("fp16", "bf16"), doc="fp16 or bf16 autocast.")
    split_batches = property(lambda self: self.dataloader_config.split_batches)

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
        self._window.steps = check_accumulation_steps(value, argument="accelerator.gradient_accumulation_steps = ...")

    @property
    def sync_gradients(self) -> bool:
        """True on the micro-step whose ``optimizer.step()`` really updates the weights."""
        return self._window.sync_gradients

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped because fp16 gradients overflowed."""
        for opt in self._optimizers:  # a loop, not any(<generator>): the Trainer reads this every step
            if opt._step_was_skipped:
                return True
        return False

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
    prepare = _prepare.prepare
    prepare_model = _prepare.prepare_model
    prepare_optimizer = _prepare.prepare_optimizer
    prepare_scheduler = _prepare.prepare_scheduler
    prepare_data_loader = _prepare.prepare_data_loader
    replace_dataloader = _prepare.replace_dataloader
    skip_first_batches = _prepare.skip_first_batches

    # -- the step ----------------------------------------------------------------------------------------------
    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager:
        """One micro-step of an accumulation window; gradient sync across processes only on its last one."""
        return MicroStep(self, models)

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
        precision = self.precision
        (precision.scale_loss(loss) if precision.scales_loss else loss).backward(**kwargs)

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
        from .checkpointing.weights import save_model_weights

        state = self.get_state_dict(model)
        if self.is_main_process:
            save_model_weights(state, os.fspath(save_directory), max_shard_size, safe_serialization)
        self.wait_for_everyone()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Adds objects with ``state_dict()``/``load_state_dict()`` to what ``save_state``/``load_state`` keep."""
        self._custom_objects.extend(checkpointable(objects))

    def save_state(self, output_dir: str | os.PathLike | None = None, *, async_save: bool = False,
                   **kwargs: Any) -> str:
        """Saves everything needed to resume (see ``checkpoint.save_state``); returns the folder.

        ``async_save=True`` (one process, no FSDP) copies the state to CPU memory now and writes and commits it on
        a background thread; the next save, ``load_state`` and ``end_training`` wait for it.
        """
        target = None if output_dir is None else os.fspath(output_dir)
        return checkpoint.save_state(self._checkpoint_contents(), target, async_save=async_save, **kwargs)

    def load_state(self, input_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        """Restores what ``save_state`` wrote (the newest complete automatic checkpoint when no folder is given)."""
        checkpoint.load_state(self._checkpoint_contents(), None if input_dir is None else os.fspath(input_dir), **kwargs)

    def _checkpoint_contents(self) -> CheckpointContents:
        """What ``save_state``/``load_state`` work on, described for checkpoint I/O (which never sees ``self``)."""
        return CheckpointContents(
            models=self._models, optimizers=self._optimizers, schedulers=self._schedulers,
            dataloaders=self._dataloaders, custom_objects=self._custom_objects, precision=self.precision,
            window=self._window, strategy=self.strategy, project=self.project_configuration,
            hooks=self._options.hooks, io=checkpoint_io(self),
            stateful_loaders=self.dataloader_config.use_stateful_dataloader, unwrap=self.unwrap_model)

    def wait_for_checkpoints(self) -> None:
        """Waits for the asynchronous ``save_state`` in flight (raising its error here) and for the background
        deletion of replaced or rotated-out checkpoint folders; returns at once when there is none."""
        _wait_for_checkpoints(self)

    def _counters_state_dict(self) -> dict[str, int]:
        return self._checkpoint_contents().counters()

    # -- processes --------------------------------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        self.strategy.barrier()

    def broadcast_object(self, obj: Any, from_process: int = 0) -> Any:
        """``obj`` as process ``from_process`` has it, on every process (picklable objects; collective)."""
        return self.strategy.broadcast_object(obj, src=from_process)

    main_process_first = processes.main_process_first
    local_main_process_first = processes.local_main_process_first

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> contextlib.AbstractContextManager:
        return collectives.split_between_processes(self.strategy, inputs, apply_padding)

    print = processes.print_on_main

    def gather(self, tensor: Any) -> Any:
        return collectives.gather(self.strategy, tensor)

    gather_for_metrics = processes.gather_for_metrics
    reduce = processes.reduce

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        return collectives.pad_across_processes(self.strategy, tensor, dim, pad_index, pad_first)

    # -- trackers ----------------------------------------------------------------------------------------------
    init_trackers = processes.init_trackers
    get_tracker = processes.get_tracker
    log = processes.log

    end_training = processes.end_training
    free_memory = processes.free_memory

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

