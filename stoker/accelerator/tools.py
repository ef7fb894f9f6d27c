"""Accelerator tools beyond the training step: saving any object, state hooks, profiling, uneven inputs.

The facade's methods of the same names forward here. Each function takes the Accelerator and uses its public
properties plus the few internals named in its docstring; none of them is on the per-step path.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .kwargs import ProfileKwargs

# The Accelerator these functions serve. Not imported: it imports this module (that would be a circle).
Facade = Any


class StateHooks:
    """Functions run by ``save_state`` before it writes and by ``load_state`` before it reads the models.

    A save hook is called as ``hook(models, weights, output_dir)``: ``weights`` holds one state dict per model,
    and a hook that saves a model its own way removes that model's entry (then ``model_{i}`` numbers the rest).
    A load hook is called as ``hook(models, input_dir)`` and removes the models it loaded itself.
    """

    def __init__(self) -> None:
        self.save: OrderedDict[int, Callable] = OrderedDict()
        self.load: OrderedDict[int, Callable] = OrderedDict()

    def register(self, table: OrderedDict, hook: Callable, name: str) -> Any:
        from torch.utils.hooks import RemovableHandle

        if not callable(hook):
            raise TypeError(f"{name}(hook) needs a callable, got {type(hook).__name__}.")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    def run_save(self, models: list[torch.nn.Module], weights: list[dict], output_dir: str) -> None:
        """Runs the save hooks; ``output_dir`` is the checkpoint's temporary folder (renamed when complete)."""
        for hook in list(self.save.values()):
            hook(models, weights, output_dir)
        folders = [n for n in os.listdir(output_dir) if os.path.isdir(os.path.join(output_dir, n))] if self.save else []
        if folders:
            raise ValueError(
                f"A save_state pre-hook created the folder(s) {folders} in the checkpoint; stoker checkpoints hold "
                "files only (each is listed and checksummed in the manifest). Write files into output_dir, e.g. "
                "model.save_pretrained(output_dir) or torch.save(..., os.path.join(output_dir, 'extra.pt'))."
            )

    def run_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        for hook in list(self.load.values()):
            hook(models, input_dir)

    def __getstate__(self) -> dict[str, Any]:
        return {"save": OrderedDict(), "load": OrderedDict()}  # hooks are often closures: not carried by pickle


def accelerator_save(accelerator: Facade, obj: Any, f: str | os.PathLike | Any,
                     safe_serialization: bool = False) -> None:
    """``Accelerator.save``: writes ``obj`` to ``f`` from the main process (``torch.save``, or safetensors with
    ``safe_serialization``); a path is written atomically (a temporary file, then a rename)."""
    save(obj, f, write=accelerator.is_main_process, safe_serialization=safe_serialization)


def register_save_state_pre_hook(accelerator: Facade, hook: Callable) -> Any:
    """``Accelerator.register_save_state_pre_hook``: ``hook(models, weights, output_dir)`` runs in ``save_state``
    before anything is written (see :class:`StateHooks`); returns a handle whose ``remove()`` unregisters it."""
    hooks = accelerator._options.hooks
    return hooks.register(hooks.save, hook, "register_save_state_pre_hook")


def register_load_state_pre_hook(accelerator: Facade, hook: Callable) -> Any:
    """``Accelerator.register_load_state_pre_hook``: ``hook(models, input_dir)`` runs in ``load_state`` before the
    models are loaded (see :class:`StateHooks`); returns a handle whose ``remove()`` unregisters it."""
    hooks = accelerator._options.hooks
    return hooks.register(hooks.load, hook, "register_load_state_pre_hook")


def save(obj: Any, f: str | os.PathLike | Any, *, write: bool, safe_serialization: bool = False) -> None:
    """Writes ``obj`` to ``f`` (a path or a file object) when ``write`` is True.

    ``torch.save``, or safetensors (a flat dict of tensors) with ``safe_serialization``. A path is written to a
    temporary file first and renamed into place, so a crash never leaves a half-written file under that name.
    """
    if not write:
        return
    if safe_serialization:
        from safetensors.torch import save as to_bytes

        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise TypeError("save(obj, f, safe_serialization=True) needs a flat dict of tensors (a state dict); got "
                            f"{type(obj).__name__}. Use safe_serialization=False for other objects.")
        data = to_bytes({k: v.contiguous() for k, v in obj.items()}, metadata={"format": "pt"})
        writer: Callable[[Any], None] = lambda handle: handle.write(data)  # noqa: E731
    else:
        writer = lambda handle: torch.save(obj, handle)  # noqa: E731
    if not isinstance(f, (str, os.PathLike)):
        writer(f)
        return
    path = os.fspath(f)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            writer(handle)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def profile(accelerator: Facade, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
    """``Accelerator.profile``: ``torch.profiler`` around the block (yields the profiler), configured by
    ``profile_handler`` or else the ``ProfileKwargs`` of ``kwargs_handlers``. With ``output_trace_dir`` each process
    writes ``profile_{process_index}.json`` there afterwards (then all processes meet)."""
    from .kwargs import ProfileKwargs

    handler = profile_handler or accelerator._options.profile or ProfileKwargs()
    with handler.build() as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, f"profile_{accelerator.process_index}.json"))
    accelerator.wait_for_everyone()


@contextlib.contextmanager
def join_uneven_inputs(accelerator: Facade, joinables: list[Any],
                       even_batches: bool | None = None) -> Iterator[Any]:
    """``Accelerator.join_uneven_inputs``: ``torch.distributed.algorithms.Join`` over ``joinables`` (DDP models),
    so that processes may run out of batches at different times. ``even_batches`` overrides the prepared map-style
    loaders' setting inside the block (Join is only enabled when batches are not evened out).

    Uses ``accelerator._dataloaders`` (the prepared loaders) to apply the override.
    """
    from .data import ShardedBatchSampler
    from .state import DistributedType

    multi = str(accelerator.distributed_type.value).startswith("MULTI_")
    if not multi:
        if accelerator.distributed_type != DistributedType.NO:
            warnings.warn("join_uneven_inputs is only supported for multi-GPU/multi-CPU (DDP) training; it has no "
                          f"effect with {accelerator.distributed_type.value}.", UserWarning, stacklevel=3)
        yield joinables
        return
    saved: list[tuple[ShardedBatchSampler, bool]] = []
    if even_batches is not None:
        iterable_seen = False
        for loader in accelerator._dataloaders:
            sampler = getattr(loader, "batch_sampler", None)
            if isinstance(sampler, ShardedBatchSampler):
                saved.append((sampler, sampler.even_batches))
                sampler.even_batches = even_batches
            else:
                iterable_seen = True
        if iterable_seen:
            warnings.warn("Overriding even_batches is only supported for map-style datasets, yet some prepared "
                          "loaders are iterable; their setting is unchanged.", UserWarning, stacklevel=3)
    else:
        even_batches = accelerator.even_batches
    from torch.distributed.algorithms import Join

    try:
        with Join(joinables, enable=not even_batches, throw_on_early_termination=False):
            yield joinables
    finally:
        for sampler, value in saved:
            sampler.even_batches = value


@contextlib.contextmanager
def trigger_sync_in_backward(model: torch.nn.Module) -> Iterator[None]:
    """Makes the next backward of ``model`` synchronise gradients across processes even inside ``no_sync``.

    DDP: its reducer is told to expect a backward now; FSDP2: gradient reduction is switched on for the block.
    One process: nothing to do.
    """
    if hasattr(model, "reducer") and hasattr(model, "require_backward_grad_sync"):  # DistributedDataParallel
        old_backward, old_forward = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = True
        model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])  # the forward ran under no_sync: arm the buckets now
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = old_backward, old_forward
    elif hasattr(model, "set_requires_gradient_sync"):  # an FSDP2 module
        model.set_requires_gradient_sync(True)
        yield
    else:
        yield


def verify_device_map(model: torch.nn.Module) -> bool:
    """True when ``model`` (or a submodule) was spread over several devices with a ``hf_device_map``."""
    return any(len(getattr(m, "hf_device_map", None) or {}) > 1 for m in model.modules())


def accelerator_getstate(accelerator: Facade) -> dict[str, Any]:
    """``Accelerator.__getstate__``: what pickling an Accelerator keeps: everything but the background checkpoint worker (made again on use)
    and the loaders being iterated right now (an iteration does not survive a copy)."""
    state = dict(accelerator.__dict__)
    state.pop("_checkpoint_io", None)  # the loaders being iterated are dropped by LoaderContext's own pickling
    return state
