"""Runs Accelerate's own test-script functions with stoker in Accelerate's place.

Accelerate ships its distributed test scripts inside its wheel (``accelerate/test_utils/scripts/``). Each script
module imports ``Accelerator`` and friends into its own namespace; :func:`swapped` replaces those names in the
module with stoker's, so the functions run unchanged against stoker. Helpers of Accelerate's test utilities that
read Accelerate's process-wide state (``are_the_same_tensors``) and Accelerate's low-level ``prepare_data_loader``
are replaced by equivalents written on stoker's public API (below). Nothing here changes what a function asserts.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

import stoker
import stoker.utils as su
from stoker.accelerator.data.samplers import SeedableRandomSampler
from stoker.compat.accelerate.state import AcceleratorState, GradientState, PartialState

SCRIPTS = "accelerate.test_utils.scripts"


def _are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when every process holds the same ``tensor`` (stoker's gather instead of Accelerate's state)."""
    tensors = su.gather(tensor[None].clone()).cpu()
    return all(torch.equal(t, tensor.cpu()) for t in tensors)


def _prepare_data_loader(dataloader: Any, device: Any = None, num_processes: Any = None, process_index: Any = None,
                         split_batches: bool = False, put_on_device: bool = False, rng_types: Any = None,
                         dispatch_batches: Any = None, even_batches: bool = True, use_seedable_sampler: bool = False,
                         **kwargs: Any) -> Any:
    """Accelerate's low-level ``prepare_data_loader`` expressed with a stoker Accelerator's ``prepare``."""
    fields = dict(split_batches=split_batches, even_batches=even_batches, use_seedable_sampler=use_seedable_sampler)
    if dispatch_batches is not None and hasattr(stoker.DataLoaderConfiguration(), "dispatch_batches"):
        fields["dispatch_batches"] = dispatch_batches
    accelerator = stoker.Accelerator(dataloader_config=stoker.DataLoaderConfiguration(**fields), rng_types=rng_types)
    return accelerator.prepare_data_loader(dataloader, device_placement=put_on_device)


class _SeedableMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        from accelerate.data_loader import SeedableRandomSampler as Accelerates

        return isinstance(obj, (SeedableRandomSampler, Accelerates))


class _Seedable(metaclass=_SeedableMeta):
    """``SeedableRandomSampler`` for the scripts: built, it is Accelerate's own (the scripts' reference loops use it
    on plain DataLoaders); in ``isinstance`` checks on a prepared loader, stoker's seedable sampler counts too."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from accelerate.data_loader import SeedableRandomSampler as Accelerates

        return Accelerates(*args, **kwargs)


REPLACEMENTS: dict[str, Any] = {
    "Accelerator": stoker.Accelerator,
    "AcceleratorState": AcceleratorState,
    "PartialState": PartialState,
    "GradientState": GradientState,
    "DataLoaderConfiguration": stoker.DataLoaderConfiguration,
    "GradientAccumulationPlugin": su.GradientAccumulationPlugin,
    "DistributedType": su.DistributedType,
    "set_seed": su.set_seed,
    "gather": su.gather,
    "gather_object": su.gather_object,
    "broadcast": su.broadcast,
    "reduce": su.reduce,
    "pad_across_processes": su.pad_across_processes,
    "synchronize_rng_states": su.synchronize_rng_states,
    "are_the_same_tensors": _are_the_same_tensors,
    "prepare_data_loader": _prepare_data_loader,
    "SeedableRandomSampler": _Seedable,
    "notebook_launcher": stoker.notebook_launcher,
    "debug_launcher": stoker.debug_launcher,
}


def load(script: str) -> ModuleType:
    """Accelerate's test script ``script`` (e.g. ``"test_sync"``) as a module."""
    return importlib.import_module(f"{SCRIPTS}.{script}")


@contextlib.contextmanager
def swapped(module: ModuleType) -> Iterator[ModuleType]:
    """``module`` with every name of :data:`REPLACEMENTS` it imported pointing at stoker's, restored afterwards."""
    saved = {name: module.__dict__[name] for name in REPLACEMENTS if name in module.__dict__}
    module.__dict__.update({name: REPLACEMENTS[name] for name in saved})
    try:
        yield module
    finally:
        module.__dict__.update(saved)
