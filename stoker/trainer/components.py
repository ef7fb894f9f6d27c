"""The Trainer's callbacks and loggers, built from ``Trainer(callbacks=..., logger=...)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..accelerator import Accelerator, DataLoaderConfiguration, ensure_processes, resolve_num_processes
from .hooks import check_callbacks

if TYPE_CHECKING:
    from ..loggers import Logger


def build_callbacks(callbacks: Any, checkpointing: bool, progress_bar: bool, model_summary: bool = False) -> list[Any]:
    """The user's callbacks (checked), plus a default ``ModelSummary``/``ModelCheckpoint``/``ProgressBar`` when
    enabled and absent."""
    from ..callbacks import ModelCheckpoint, ModelSummary, ProgressBar

    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    result = check_callbacks(callbacks)
    if not checkpointing and any(isinstance(c, ModelCheckpoint) for c in result):
        raise ValueError("Trainer(enable_checkpointing=False) but found a ModelCheckpoint in callbacks: remove it, or "
                         "drop enable_checkpointing=False.")
    if model_summary and not any(isinstance(c, ModelSummary) for c in result):
        result.append(ModelSummary())
    if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in result):
        result.append(ModelCheckpoint())
    if progress_bar and not any(isinstance(c, ProgressBar) for c in result):
        result.append(ProgressBar())
    keys = [c.state_key for c in result]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"Trainer(callbacks=...) has several callbacks with state_key {duplicates}; their "
                         "checkpoint states would overwrite each other. Give each a distinct state_key.")
    return result


def build_loggers(logger: Any, root: str) -> list[Any]:
    """``Trainer(logger=...)`` as a list of loggers.

    ``True``: a TensorBoardLogger under ``root``; ``False``/None: none; a logger name (``"csv"``, ``"tensorboard"``,
    any registered in ``stoker.loggers``), a Logger, or a list mixing them. The loggers of the run that have no
    version of their own share one ``version_{n}``.
    """
    from .. import loggers

    if logger is True:
        return [loggers.TensorBoardLogger(root, name="stoker_logs")]
    if logger is False or logger is None:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    for item in items:
        if not isinstance(item, (str, loggers.Logger)):
            raise TypeError(f"Trainer(logger={logger!r}): expected True, False, a logger name such as 'csv' or "
                            f"'tensorboard', a stoker Logger, or a list of these; {type(item).__name__} is none "
                            "of them.")
    return loggers.build_loggers(items, root, name="stoker_logs", argument="Trainer(logger=...): logger")


def agree_on_log_dirs(accelerator: Accelerator, loggers: list[Logger]) -> None:
    """Every process takes the main process's logger versions, so ``trainer.log_dir`` is one folder (another
    process would otherwise count the main's new ``version_{n}`` folder and pick ``n + 1``)."""
    if accelerator.num_processes > 1 and loggers:
        main = accelerator.is_main_process
        versions = accelerator.broadcast_object([lg.version if main else None for lg in loggers])
        for lg, version in zip(loggers, versions):
            lg.version = version  # resolved once, before anything is written


def make_accelerator(accelerator: str, devices: int | str | list[int], strategy: Any, accumulate: int,
                     precision: str, root: str, own_samplers: bool,
                     cls: type[Accelerator] = Accelerator) -> tuple[Accelerator, int]:
    """The Trainer's Accelerator and the processes per node. Makes this job ``devices`` processes first (under
    torchrun: checks the count; from a plain ``python script.py`` with devices > 1: re-runs the script in that many
    processes). ``cls``: the Accelerator class (``stoker.Trainer``'s answers Accelerate's names too)."""
    from . import args as check

    accumulate = check.accumulation_steps("accumulate", accumulate)  # stored by the Accelerator only
    cpu = check.accelerator_choice(accelerator)
    per_node = resolve_num_processes(devices, accelerator.lower())
    ensure_processes(per_node)
    acc = cls(
        mixed_precision=precision, gradient_accumulation_steps=accumulate, project_dir=root, cpu=cpu,
        strategy=strategy,
        # Every loader resumable; schedulers are stepped by the Trainer (once per applied optimizer step).
        # use_distributed_sampler=False (one process): the user's own samplers are kept, a RandomSampler too.
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True, use_seedable_sampler=not own_samplers),
        step_scheduler_with_optimizer=False,
    )
    if own_samplers and acc.num_processes > 1:
        raise ValueError("Trainer(use_distributed_sampler=False) with several processes: stoker always gives each "
                         "process its own share of every loader (its samplers are resumable and seeded). Drop the "
                         "argument, and any DistributedSampler of your own.")
    return acc, per_node
