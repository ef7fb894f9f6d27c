"""``stoker.Accelerator``: the core Accelerator plus Accelerate's further arguments, attributes and methods.

It translates at the edge: kwargs handlers and plugins become a configured strategy, precision settings and
``sync_each_batch`` (``options.py``); launcher environment variables fill the arguments not given
(``environment.py``); ``log_with`` builds stoker loggers (``trackers.py``); ``state``/``gradient_state`` are views
of this instance (``state.py``). The core (``stoker.accelerator.Accelerator``) knows none of these names.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...accelerator.accelerator import Accelerator as CoreAccelerator
from ...accelerator.arguments import check_accumulation_steps
from ...accelerator.config import DataLoaderConfiguration, ProjectConfiguration, check_configurations
from ...accelerator.data.prepare import skip_first_batches
from ...accelerator.data.samplers import ShardedBatchSampler
from ...accelerator.distributed import collectives
from ...accelerator.operations import apply_to_tensors
from . import tools
from .environment import settings_from_environment
from .kwargs import ProfileKwargs
from .options import AcceleratorOptions
from .state import AcceleratorState, DistributedType, GradientState, forward_to_state
from .trackers import build_trackers, check_log_with, find_tracker, tracker_name


class Accelerator(CoreAccelerator):
    """Runs your training loop on any device, precision and process count (Hugging Face Accelerate's API).

    Takes every argument of Accelerate's ``Accelerator`` that stoker supports; see the core class for the step.

    Example:
        >>> accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=2, log_with="tensorboard")
        >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
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
        strategy: Any = "auto",
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
        options = AcceleratorOptions(
            kwargs_handlers=kwargs_handlers, fsdp_plugin=fsdp_plugin, deepspeed_plugin=deepspeed_plugin,
            gradient_accumulation_plugin=gradient_accumulation_plugin, dynamo_backend=dynamo_backend,
            dynamo_plugin=dynamo_plugin, rng_types=rng_types, split_batches=split_batches)
        steps = options.gradient_accumulation_steps(gradient_accumulation_steps)
        # None: the launcher's setting (`stoker launch --mixed_precision ...`), else "no" and 1.
        mixed_precision, steps, cpu = settings_from_environment(mixed_precision, steps, cpu)
        dataloader_config = options.dataloader_config(dataloader_config)
        check_accumulation_steps(steps)  # before the strategy joins a process group
        check_configurations(project_config, dataloader_config)
        super().__init__(mixed_precision, steps, project_dir, project_config, dataloader_config, cpu,
                         step_scheduler_with_optimizer, device_placement, options.make_strategy(strategy, cpu))
        self._options = options
        options.setup_precision(self.precision)  # GradScalerKwargs, AutocastKwargs
        self.sync_each_batch = options.sync_each_batch
        self.sync_with_dataloader = options.sync_with_dataloader
        if options.syncs_rng:
            self.loader_context.epoch_started = options.epoch_started
        # Accelerate's state objects, as views of this instance (state.py): no process-wide singleton.
        self.state = AcceleratorState(strategy=self.strategy, precision=self.precision,
                                      fsdp_plugin=options.fsdp_plugin, dynamo_plugin=options.dynamo)
        self.gradient_state = GradientState(accelerator=self)
        self.log_with = check_log_with(log_with)  # a misspelt or missing tracker fails here, not at init
        self.trackers: list[Any] = []
        self._trackers_initialized = False

    # -- Accelerate's facts -------------------------------------------------------------------------------------
    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU``/``MULTI_GPU``/... (DDP) or ``FSDP``; also equal to the old strategy class names."""
        return self.state.distributed_type

    native_amp = property(lambda self: self.precision.autocasts, doc="fp16 or bf16 autocast.")

    @property
    def dispatch_batches(self) -> bool | None:
        """Accepted for Accelerate compatibility; stoker's loaders never dispatch (each process loads its share)."""
        return getattr(self.dataloader_config, "dispatch_batches", None)

    is_last_process = property(lambda self: self.process_index == self.num_processes - 1)
    use_distributed = property(lambda self: self.num_processes > 1)
    project_dir = property(lambda self: self.project_configuration.project_dir)
    logging_dir = property(lambda self: self.project_configuration.logging_dir)
    save_iteration = property(lambda self: self.project_configuration.iteration)
    split_batches = property(lambda self: self.dataloader_config.split_batches)
    even_batches = property(lambda self: self.dataloader_config.even_batches,
                            lambda self, value: setattr(self.dataloader_config, "even_batches", value))
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    use_stateful_dataloader = property(lambda self: self.dataloader_config.use_stateful_dataloader)
    non_blocking = property(lambda self: self.dataloader_config.non_blocking)
    scaler = property(lambda self: self.precision.scaler, doc="The fp16 run's GradScaler; None for other precisions.")

    # Accelerate's names of the prepared objects (scripts and Accelerate's tests read them).
    _models = property(lambda self: self._prepared.models)
    _optimizers = property(lambda self: self._prepared.optimizers)
    _schedulers = property(lambda self: self._prepared.schedulers)
    _dataloaders = property(lambda self: self._prepared.dataloaders)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False, *, autocast_forward: bool = True) -> torch.nn.Module:
        """The core's ``prepare_model``, then ``torch.compile`` around it with ``dynamo_backend``/``dynamo_plugin``."""
        prepared = super().prepare_model(model, device_placement, evaluation_mode, autocast_forward=autocast_forward)
        compiled = self._options.compile(prepared)
        if compiled is not prepared:  # the registry keeps what the user gets back
            models = self._prepared.models
            models[next(i for i, m in enumerate(models) if m is prepared)] = compiled
        return compiled

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader that starts ``num_batches`` in, without loading the skipped samples."""
        if isinstance(num_batches, bool) or not isinstance(num_batches, int):
            raise TypeError(f"skip_first_batches(num_batches={num_batches!r}) must be an int >= 0.")
        if num_batches < 0:
            raise ValueError(f"skip_first_batches(num_batches={num_batches!r}) must be an int >= 0.")
        return skip_first_batches(dataloader, num_batches)

    # -- processes ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. to download or cache), then the others."""
        with self.state.main_process_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        with self.state.local_main_process_first():
            yield

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> contextlib.AbstractContextManager:
        return collectives.split_between_processes(self.strategy, inputs, apply_padding)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        return collectives.pad_across_processes(self.strategy, tensor, dim, pad_index, pad_first)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gathers like :meth:`gather`; at a loader's last batch keeps as many rows as that step has real samples
        (the repeated samples that evened out the processes' batches are dropped)."""
        objects = use_gather_object or not collectives.has_tensor(input_data)
        if objects:
            parts = self.strategy.all_gather_object(input_data)
            data: Any = [x for part in parts for x in (part if isinstance(part, list) else [part])]
        else:  # tensors at any depth: a tuple or list of them is cut tensor by tensor, not as a list of items
            data = self.gather(input_data)
        loaders = self.iterating_loaders
        if not (loaders and loaders[-1].end_of_dataloader):
            return data
        # Accelerate keeps the last step's real sample count, so a row per batch item (``loss.repeat(batch_size)``)
        # is cut to the dataset too; where batches have no fixed size, drop the repeated samples instead.
        keep = loaders[-1].final_step_samples
        if keep is None:
            drop = loaders[-1].padding_samples
            if not drop:
                return data
            if objects:
                return data[:len(data) - drop]
            return apply_to_tensors(lambda t: t[: t.shape[0] - drop], data)
        if not keep:
            return data
        return data[:keep] if objects else apply_to_tensors(lambda t: t[:keep], data)

    on_main_process = forward_to_state(AcceleratorState.on_main_process)
    on_local_main_process = forward_to_state(AcceleratorState.on_local_main_process)
    on_last_process = forward_to_state(AcceleratorState.on_last_process)
    on_process = forward_to_state(AcceleratorState.on_process)
    on_local_process = forward_to_state(AcceleratorState.on_local_process)
    set_trigger = forward_to_state(AcceleratorState.set_trigger)
    check_trigger = forward_to_state(AcceleratorState.check_trigger)
    trigger_sync_in_backward = staticmethod(tools.trigger_sync_in_backward)
    verify_device_map = staticmethod(tools.verify_device_map)

    def save(self, obj: Any, f: str | os.PathLike | Any, safe_serialization: bool = False) -> None:
        """Writes ``obj`` to ``f`` from the main process (``torch.save``, or safetensors with
        ``safe_serialization``); a path is written atomically (a temporary file, then a rename)."""
        tools.save(obj, f, write=self.is_main_process, safe_serialization=safe_serialization)

    def register_save_state_pre_hook(self, hook: Callable) -> Any:
        """``hook(models, weights, output_dir)`` runs in ``save_state`` before anything is written (see
        ``StateHooks``); returns a handle whose ``remove()`` unregisters it."""
        hooks = self.checkpoint_hooks
        return hooks.register(hooks.save, hook, "register_save_state_pre_hook")

    def register_load_state_pre_hook(self, hook: Callable) -> Any:
        """``hook(models, input_dir)`` runs in ``load_state`` before the models are loaded (see ``StateHooks``);
        returns a handle whose ``remove()`` unregisters it."""
        hooks = self.checkpoint_hooks
        return hooks.register(hooks.load, hook, "register_load_state_pre_hook")

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """``torch.profiler`` around the block (yields the profiler), configured by ``profile_handler`` or else the
        ``ProfileKwargs`` of ``kwargs_handlers``. With ``output_trace_dir`` each process writes
        ``profile_{process_index}.json`` there afterwards (then all processes meet)."""
        handler = profile_handler or self._options.profile or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is None:
            return
        os.makedirs(handler.output_trace_dir, exist_ok=True)
        profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, f"profile_{self.process_index}.json"))
        self.wait_for_everyone()

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[Any]:
        """``torch.distributed.algorithms.Join`` over ``joinables`` (DDP models), so that processes may run out of
        batches at different times. ``even_batches`` overrides the prepared map-style loaders' setting inside the
        block (Join is only enabled when batches are not evened out)."""
        if not str(self.distributed_type.value).startswith("MULTI_"):
            if self.distributed_type != DistributedType.NO:
                warnings.warn("join_uneven_inputs is only supported for multi-GPU/multi-CPU (DDP) training; it has "
                              f"no effect with {self.distributed_type.value}.", UserWarning, stacklevel=3)
            yield joinables
            return
        saved = self._override_even_batches(even_batches) if even_batches is not None else []
        from torch.distributed.algorithms import Join

        try:
            with Join(joinables, enable=not (self.even_batches if even_batches is None else even_batches),
                      throw_on_early_termination=False):
                yield joinables
        finally:
            for sampler, value in saved:
                sampler.even_batches = value

    def _override_even_batches(self, even_batches: bool) -> list[tuple[ShardedBatchSampler, bool]]:
        saved: list[tuple[ShardedBatchSampler, bool]] = []
        iterable_seen = False
        for loader in self._prepared.dataloaders:
            sampler = getattr(loader, "batch_sampler", None)
            if isinstance(sampler, ShardedBatchSampler):
                saved.append((sampler, sampler.even_batches))
                sampler.even_batches = even_batches
            else:
                iterable_seen = True
        if iterable_seen:
            warnings.warn("Overriding even_batches is only supported for map-style datasets, yet some prepared "
                          "loaders are iterable; their setting is unchanged.", UserWarning, stacklevel=4)
        return saved

    # -- trackers -----------------------------------------------------------------------------------------------
    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Creates the loggers named by ``log_with`` under ``logging_dir`` (main process only), beside the custom
        trackers given there (started here).

        ``config`` is logged as their hyperparameters; ``init_kwargs`` holds constructor arguments per tracker
        name, e.g. ``{"wandb": {"entity": "me", "tags": ["baseline"]}}``. The loggers built here share one version.
        Each is named by its kind (``tracker.name == "tensorboard"``); ``tracker.run_name`` is ``project_name``.
        """
        self._trackers_initialized = True
        root = self.logging_dir or self.project_dir or "."
        self.trackers = build_trackers(self.log_with, root, project_name, config, init_kwargs,
                                       is_main_process=self.is_main_process)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker named ``name`` (``"wandb"``, ``"mlflow"``, ``"tensorboard"``, ``"csv"``); ``unwrap=True``
        gives its underlying object (W&B run, ``MlflowClient``, ``SummaryWriter``). On other processes a tracker
        whose methods do nothing."""
        return find_tracker(self.trackers, name, unwrap, is_main_process=self.is_main_process,
                            initialized=self._trackers_initialized)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Logs ``values`` at ``step`` to every tracker (main process only): ``tracker.log(values, step, **kwargs)``
        with ``kwargs`` from ``log_kwargs`` by tracker name, e.g. ``{"wandb": {"commit": False}}``."""
        if self.is_main_process:
            for tracker in self.trackers:
                kwargs = log_kwargs.get(tracker_name(tracker), {}) if log_kwargs else {}
                tracker.log(values, step=step, **kwargs)

    def end_training(self) -> None:
        """Finishes the trackers, then the core's ``end_training`` (background checkpoints, the process group)."""
        try:
            self.wait_for_checkpoints()
        finally:
            for tracker in self.trackers:
                tracker.finish()
            super().end_training()

    def clear(self, *objects: Any) -> list[None]:
        return self.free_memory(*objects)
