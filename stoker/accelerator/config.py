"""Configuration objects passed to :class:`~stoker.Accelerator` (the same names and fields as Accelerate's)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class ProjectConfiguration:
    """Where a run writes its checkpoints and logs, and how checkpoints are named.

    Example:
        >>> config = ProjectConfiguration(project_dir="runs/exp1", automatic_checkpoint_naming=True, total_limit=3)
        >>> # Accelerator(project_config=config).save_state() writes runs/exp1/checkpoints/checkpoint_0, _1, ...

    Attributes:
        project_dir: Root folder of the run.
        logging_dir: Folder for trackers; defaults to ``project_dir``.
        automatic_checkpoint_naming: ``save_state()`` without a folder writes
            ``{project_dir}/checkpoints/checkpoint_{n}``.
        total_limit: Keep at most this many automatically named checkpoints (the oldest go, after the new one is
            complete).
        iteration: The number the next automatic checkpoint gets; restored by ``load_state``.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0

    def __post_init__(self) -> None:
        if self.project_dir is not None:
            self.project_dir = os.fspath(self.project_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        else:
            self.logging_dir = os.fspath(self.logging_dir)
        if self.total_limit is not None and (not isinstance(self.total_limit, int) or self.total_limit < 1):
            raise ValueError(
                f"ProjectConfiguration(total_limit={self.total_limit!r}) must be a positive int or None (keep all)."
            )
        if not isinstance(self.iteration, int) or self.iteration < 0:
            raise ValueError(f"ProjectConfiguration(iteration={self.iteration!r}) must be a non-negative int.")

    def set_directories(self, project_dir: str | os.PathLike | None = None) -> None:
        """Sets ``project_dir`` (and ``logging_dir`` when it was not given separately)."""
        same = self.logging_dir == self.project_dir
        self.project_dir = os.fspath(project_dir) if project_dir is not None else None
        if same or self.logging_dir is None:
            self.logging_dir = self.project_dir


@dataclass
class DataLoaderConfiguration:
    """How :meth:`Accelerator.prepare` rebuilds data loaders.

    Example:
        >>> config = DataLoaderConfiguration(use_stateful_dataloader=True)  # save_state records loader positions

    Attributes:
        split_batches: In several processes, split each batch between them (the batch size must divide evenly)
            instead of giving each process whole batches.
        even_batches: Repeat samples from the start of the epoch so every process gets the same number of
            batches; ``gather_for_metrics`` drops the repeats again.
        use_seedable_sampler: Shuffle with a sampler whose order depends only on its seed and epoch (the same on
            every process, and restorable).
        use_stateful_dataloader: ``save_state``/``load_state`` record and restore each prepared loader's position,
            so a resumed run continues with the next batch of the same epoch.
        non_blocking: Copy batches to the device with ``non_blocking=True``. ``None`` (the default) means "where
            it is safe": on a CUDA device, where prepared loaders with worker processes (``num_workers > 0``) then
            also pin their batches (``pin_memory``, on the loader's own thread) so the copy overlaps with compute;
            elsewhere off. Without workers nothing is pinned (a dataset may hold CUDA tensors, which cannot be
            pinned); set ``pin_memory=True`` on your loader to pin anyway. ``False`` turns both off on CUDA too.
        dispatch_batches: Accepted for Accelerate compatibility, and ``True`` behaves as ``False``: stoker never
            dispatches batches from the main process; every process reads the data itself and keeps its own
            share (Accelerate's non-dispatching behaviour, what one machine needs). Only the last, short step of
            an ``IterableDataset`` follows ``True``: it is shared in equal parts, as Accelerate's dispatcher
            shares it.
        data_seed: Seed of the prepared loaders' own shuffle generator. ``None``: drawn once from the global RNG
            at ``prepare`` (so ``set_seed`` before ``prepare`` fixes it) and broadcast from the main process.
    """

    split_batches: bool = False
    even_batches: bool = True
    use_seedable_sampler: bool = True
    use_stateful_dataloader: bool = False
    non_blocking: bool | None = None
    dispatch_batches: bool | None = None
    data_seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("split_batches", "even_batches", "use_seedable_sampler", "use_stateful_dataloader"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"DataLoaderConfiguration({name}={value!r}) must be True or False.")
        for name in ("non_blocking", "dispatch_batches"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"DataLoaderConfiguration({name}={value!r}) must be True, False or None (the "
                                "default).")
        seed = self.data_seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise ValueError(f"DataLoaderConfiguration(data_seed={seed!r}) must be an int in [0, 2**63) or None "
                             "(drawn from the global RNG at prepare).")


def check_configurations(project_config: object, dataloader_config: object) -> None:
    """The types of ``Accelerator(project_config=..., dataloader_config=...)``."""
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
