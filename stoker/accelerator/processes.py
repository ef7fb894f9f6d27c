"""The Accelerator's process and tracker methods, written as functions of the facade (its methods of the same
names): running a block on the main process first, printing once, gathering for metrics (dropping the samples that
even out the last batches), reducing, and the trackers (``init_trackers``, ``get_tracker``, ``log``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import collectives
from .trackers import build_trackers, find_tracker

# The Accelerator these functions serve. Not imported: it imports this module (that would be a circle).
Facade = Any


@contextlib.contextmanager
def main_process_first(accelerator: Facade) -> Iterator[None]:
    """The main process runs the block first (e.g. to download or cache), then the others."""
    with _first(accelerator, accelerator.is_main_process):
        yield


@contextlib.contextmanager
def local_main_process_first(accelerator: Facade) -> Iterator[None]:
    with _first(accelerator, accelerator.is_local_main_process):
        yield


@contextlib.contextmanager
def _first(accelerator: Facade, is_first: bool) -> Iterator[None]:
    if not is_first:
        accelerator.wait_for_everyone()
    yield
    if is_first:
        accelerator.wait_for_everyone()


def print_on_main(accelerator: Facade, *args: Any, **kwargs: Any) -> None:
    """``print`` on the local main process only."""
    if accelerator.is_local_main_process:
        print(*args, **kwargs)


def gather_for_metrics(accelerator: Facade, input_data: Any, use_gather_object: bool = False) -> Any:
    """Gathers like :meth:`gather`, dropping the samples repeated to even out the last batches."""
    if use_gather_object or not _has_tensor(input_data):
        parts = accelerator.strategy.all_gather_object(input_data)
        data: Any = [x for part in parts for x in (part if isinstance(part, list) else [part])]
    else:
        data = accelerator.gather(input_data)
    loader = accelerator._loader_stack[-1] if accelerator._loader_stack else None
    if loader is not None and loader.end_of_dataloader and loader.padding_samples:
        drop = loader.padding_samples
        from .operations import apply_to_tensors

        if isinstance(data, list):
            return data[:len(data) - drop]
        return apply_to_tensors(lambda t: t[: t.shape[0] - drop], data)
    return data


def reduce(accelerator: Facade, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
    out = collectives.reduce(accelerator.strategy, tensor, reduction)
    if scale != 1.0:
        from .operations import apply_to_tensors

        out = apply_to_tensors(lambda t: t * scale, out)
    return out


def init_trackers(accelerator: Facade, project_name: str, config: dict[str, Any] | None = None,
                  init_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
    """Creates the loggers named by ``log_with`` under ``logging_dir`` (main process only).

    ``config`` is logged as their hyperparameters; ``init_kwargs`` holds constructor arguments per tracker name,
    e.g. ``{"wandb": {"entity": "me", "tags": ["baseline"]}}``. The loggers built here share one version.
    """
    accelerator._trackers_initialized = True
    if not accelerator.is_main_process:
        return
    root = accelerator.logging_dir or accelerator.project_dir or "."
    accelerator.trackers = build_trackers(accelerator._log_with, root, project_name, config, init_kwargs)


def get_tracker(accelerator: Facade, name: str, unwrap: bool = False) -> Any:
    """The tracker named ``name`` (``"wandb"``, ``"mlflow"``, ``"tensorboard"``, ``"csv"``); ``unwrap=True``
    gives its underlying object (W&B run, ``MlflowClient``, ``SummaryWriter``). On other processes a tracker
    whose methods do nothing."""
    return find_tracker(accelerator.trackers, name, unwrap, is_main_process=accelerator.is_main_process,
                        initialized=accelerator._trackers_initialized)


def log(accelerator: Facade, values: dict[str, Any], step: int | None = None, log_kwargs: dict | None = None) -> None:
    """Logs ``values`` at ``step`` to every tracker (main process only). ``log_kwargs`` is accepted for
    Accelerate compatibility and not used."""
    if accelerator.is_main_process:
        for tracker in accelerator.trackers:
            tracker.log_metrics(values, step=step)


def _has_tensor(data: Any) -> bool:
    found = []
    from .operations import apply_to_tensors

    apply_to_tensors(lambda t: found.append(1) or t, data)
    return bool(found)


def end_training(accelerator: Facade) -> None:
    """Finishes the trackers and, when the Accelerator created the process group, tears it down.

    First waits for checkpoint work still running in the background: an asynchronous ``save_state`` (its
    error, if it failed, is raised here) and the deletion of folders that saves replaced or rotated out.
    """
    from .checkpointing.background import wait_for_checkpoints

    try:
        wait_for_checkpoints(accelerator)
    finally:
        for tracker in accelerator.trackers:
            tracker.finalize("success")
        accelerator.wait_for_everyone()
        accelerator.strategy.teardown()


def free_memory(accelerator: Facade, *objects: Any, reset_step: bool = True) -> list[None]:
    """Forgets every prepared object and the accumulation window (step counts restart at 0, as in Accelerate;
    ``reset_step=False`` keeps the counters, so a run that prepares new objects continues its step count),
    collects garbage and empties the device cache; returns ``[None] * len(objects)`` (assign it to drop your
    names)."""
    from ..utils.memory import release_memory

    accelerator._models.clear()
    accelerator._optimizers.clear()
    accelerator._schedulers.clear()
    accelerator._dataloaders.clear()
    if reset_step:
        accelerator._window.reset()  # the same object: prepared optimizers and schedulers hold it
    return release_memory(*objects)
