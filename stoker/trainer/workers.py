"""Warnings about how a stage's loaders load: too few workers, and an iterable dataset's ``__len__``.

The few-workers warning: a loader that loads its batches in the training process while CPUs sit idle.

The rule: this process's share of the machine is the CPUs it may run on divided by the Trainer's processes, less one
for the process itself: its *spare* CPUs. A ``DataLoader`` with fewer workers than ``min(3, spare)`` gets one
``UserWarning`` (once per loader object and stage), which starts with the phrase Lightning users search for ("The
'train_dataloader' does not have many workers"). No warning: no spare CPU, enough workers, a loader that is not a
``DataLoader`` (its workers are not ours to count), or data already in memory as tensors (a ``TensorDataset``, a
tensor, or a ``random_split`` of one: workers would only add copying).

A ``DataLoader`` with workers started by the ``"spawn"`` method (its ``multiprocessing_context``, else the process's
start method) and no ``persistent_workers`` gets Lightning's advice instead ("Consider setting
`persistent_workers=True`"): each epoch would start its workers as new interpreters, importing torch again.

A ``DataLoader`` over an ``IterableDataset`` that defines ``__len__`` warns at each request: the loader's length,
which counts the stage's batches (progress, ``limit_*_batches`` fractions, when an epoch ends), comes from that
``__len__`` and not from what the iterator yields, so it is only right when the dataset yields exactly that many
samples per process (with worker processes, each one its own share).
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, IterableDataset, Subset, TensorDataset

from .iterables import CombinedLoader
from ..user_frame import PossibleUserWarning, user_stacklevel

if TYPE_CHECKING:
    from .parts import TrainerParts
    from .stages import Stage

#: The stages each loader was warned about in (a loader given to several runs is warned about once per stage).
_WARNED: weakref.WeakKeyDictionary[DataLoader, set[str]] = weakref.WeakKeyDictionary()


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def suggested_workers(processes: int) -> int:
    """Workers worth having per loader: ``min(3, spare)`` (module docstring); 0 when no CPU is spare."""
    spare = available_cpus() // max(1, processes) - 1
    return max(0, min(3, spare))


def in_memory(dataset: Any) -> bool:
    """A dataset of tensors already in memory: a ``TensorDataset``, a tensor, or a ``Subset`` of one
    (``random_split``)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, (TensorDataset, torch.Tensor))


def warn_about_loaders(trainer: TrainerParts, loader: Any, stage: Stage) -> None:
    """The warnings of the module docstring for ``loader`` (a loader, or a ``CombinedLoader`` of several)."""
    leaves = loader.flattened if isinstance(loader, CombinedLoader) else [loader]
    for leaf in leaves:
        if isinstance(leaf, DataLoader) and isinstance(leaf.dataset, IterableDataset) and \
                callable(getattr(leaf.dataset, "__len__", None)):
            warnings.warn(f"Your `IterableDataset` has `__len__` defined. The {stage.loader_hook}'s length counts "
                          f"the {stage.name} batches, so it must match what {type(leaf.dataset).__name__} yields "
                          "in each process (with worker processes, each worker yields its own share); if it "
                          "cannot, remove __len__.", UserWarning, stacklevel=user_stacklevel())
    warn_few_workers(trainer, loader, stage)


def warn_few_workers(trainer: TrainerParts, loader: Any, stage: Stage) -> None:
    """Warns (once per loader) about each ``DataLoader`` in ``loader`` with fewer workers than suggested."""
    leaves = loader.flattened if isinstance(loader, CombinedLoader) else [loader]
    suggested = suggested_workers(trainer.accelerator.num_processes)
    for leaf in leaves:
        if not isinstance(leaf, DataLoader) or stage.name in _WARNED.setdefault(leaf, set()):
            continue
        if leaf.num_workers > 0 and not leaf.persistent_workers and _start_method(leaf) == "spawn":
            _WARNED[leaf].add(stage.name)
            warnings.warn(f"Consider setting `persistent_workers=True` in '{stage.loader_hook}' to speed up the "
                          "dataloader worker initialization: its workers are started with the 'spawn' method, so "
                          "each epoch starts them as new interpreters that import torch again.", UserWarning,
                          stacklevel=user_stacklevel())
            continue
        if leaf.num_workers >= suggested or in_memory(leaf.dataset):
            continue
        _WARNED[leaf].add(stage.name)
        warnings.warn(f"The '{stage.loader_hook}' does not have many workers: DataLoader(num_workers="
                      f"{leaf.num_workers}) loads its batches in the training process, between steps, while this "
                      f"process has CPUs to spare. Pass DataLoader(num_workers={suggested}) to load them in the "
                      "background (or ignore this when loading is cheap).", PossibleUserWarning,
                      stacklevel=user_stacklevel())


def _start_method(loader: DataLoader) -> str:
    """How ``loader``'s workers are started: its ``multiprocessing_context``'s method, else this process's (without
    fixing it: the platform's default when none was set)."""
    context = loader.multiprocessing_context
    if isinstance(context, str):
        return context
    if context is not None:
        return context.get_start_method()
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
