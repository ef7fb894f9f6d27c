"""The Trainer's callbacks and loggers, built from ``Trainer(callbacks=..., logger=...)``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..accelerator import Accelerator, DataLoaderConfiguration, ensure_processes, resolve_num_processes
from ..loggers.base import Logger
from ..loggers.foreign import owns_folder
from .hooks import check_callbacks, checkpoints_last
from .overrides import defines_hook

if TYPE_CHECKING:
    from .parts import TrainerParts

# The file the Trainer's state is saved in: it registers it first with its Accelerator (custom object #0).
TRAINER_STATE_FILE = "custom_checkpoint.safetensors"


def build_callbacks(callbacks: Any, checkpointing: bool, progress_bar: bool, model_summary: bool = False) -> list[Any]:
    """The user's callbacks (checked), plus a default ``ModelCheckpoint``, ``ProgressBar`` and ``ModelSummary`` when
    enabled and absent; the checkpoint callbacks last, as Lightning orders them (`checkpoints_last`)."""
    from ..callbacks import Callback, Checkpoint, ModelCheckpoint, ModelSummary, ProgressBar

    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    result = check_callbacks(callbacks)
    if not checkpointing and any(isinstance(c, Checkpoint) for c in result):
        raise ValueError("Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in "
                         "callbacks list: Trainer(enable_checkpointing=False) but found a ModelCheckpoint (a "
                         "Checkpoint callback) in "
                         "callbacks: remove it, or drop enable_checkpointing=False.")
    if checkpointing and not any(isinstance(c, Checkpoint) for c in result):
        result.append(ModelCheckpoint())
    bars = [type(c).__name__ for c in result if isinstance(c, ProgressBar)]
    if len(bars) > 1:
        raise ValueError("You added multiple progress bar callbacks to the Trainer, but currently only one progress "
                         f"bar is supported: Trainer(callbacks=...) has {len(bars)} progress bars {bars}; a run "
                         "draws one: keep one.")
    if bars and not progress_bar:
        raise ValueError(f"Trainer was configured with `enable_progress_bar=False` but found `{bars[0]}` in callbacks "
                         f"list: Trainer(enable_progress_bar=False) contradicts the {bars[0]} in callbacks (a "
                         "progress bar callback draws the bar): remove it, or drop enable_progress_bar=False.")
    if progress_bar and not bars:
        result.append(ProgressBar())
    if model_summary and not any(isinstance(c, ModelSummary) for c in result):
        from ..callbacks import RichModelSummary, RichProgressBar  # rich itself is imported when drawing only

        # A rich bar chosen by the user gets the table in the same look.
        rich = any(isinstance(c, RichProgressBar) for c in result)
        result.append(RichModelSummary() if rich else ModelSummary())
    # Only callbacks with a state of their own must have distinct keys: an empty state overwrites nothing.
    keys = [c.state_key for c in result if defines_hook(c, "state_dict", Callback)]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"Trainer(callbacks=...) has several callbacks with state_key {duplicates} and a state "
                         "of their own; their checkpoint states would overwrite each other. Give each a distinct "
                         "state_key.")
    return checkpoints_last(result)


def build_loggers(logger: Any, root: str) -> list[Any]:
    """``Trainer(logger=...)`` as a list of loggers.

    ``True``: a TensorBoardLogger under ``root``; ``False``/None: none; a logger name (``"csv"``, ``"tensorboard"``,
    any registered in ``stoker.loggers``), a Logger, an object of another kind that has the logger methods the
    Trainer calls (``stoker.loggers.foreign.LOGGER_METHODS``: a Lightning logger, a test double), or a list of these.
    Such a foreign logger is called, never asked for folders or versions. The loggers of the run that have no
    version of their own share one ``version_{n}``.
    """
    from .. import loggers
    from ..loggers.foreign import check_foreign_logger

    if logger is True:
        return [loggers.TensorBoardLogger(root, name="stoker_logs")]
    if logger is False or logger is None:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    ours = [item for item in items if isinstance(item, (str, loggers.Logger))]
    for item in items:
        if not isinstance(item, (str, loggers.Logger)):
            check_foreign_logger(item, f"Trainer(logger={logger!r})")
    built = loggers.build_loggers(ours, root, name="stoker_logs", argument="Trainer(logger=...): logger")
    foreign = [item for item in items if not isinstance(item, (str, loggers.Logger))]
    if len(built) != len(ours):  # "all" became several loggers: stoker's first, then the foreign ones
        return built + foreign
    mine = iter(built)
    return [next(mine) if isinstance(item, (str, loggers.Logger)) else item for item in items]


def mark_main_process(loggers: list[Any], is_main_process: bool) -> None:
    """Tells each stoker logger whether it is on the run's main process (``Logger.on_main_process``)."""
    for logger in loggers:
        if owns_folder(logger):
            logger.on_main_process = is_main_process


def settle_loggers(accelerator: Accelerator, loggers: list[Logger]) -> None:
    """Every process takes the main process's logger versions, so ``trainer.log_dir`` is one folder (another
    process would otherwise count the main's new ``version_{n}`` folder and pick ``n + 1``); and the loggers of the
    other processes are told they are not on the main one (``Logger.on_main_process``: their ``experiment`` is a
    ``DummyExperiment``, so a step's own ``self.logger.experiment...`` calls write once, as in Lightning)."""
    mark_main_process(loggers, accelerator.is_main_process)
    # a foreign logger has no version of ours; a subclass that answers `version` itself keeps its answer
    loggers = [lg for lg in loggers if owns_folder(lg) and type(lg).version is Logger.version]
    if accelerator.num_processes > 1 and loggers:
        main = accelerator.is_main_process
        versions = accelerator.broadcast_object([lg.version if main else None for lg in loggers])
        for lg, version in zip(loggers, versions):
            lg.version = version  # resolved once, before anything is written


def checkpoint_search_folders(trainer: TrainerParts) -> list[str]:
    """Where ``ckpt_path="last"`` looks (``stoker.loggers.layout``): the ModelCheckpoint's ``dirpath``, each version
    folder's ``checkpoints`` of the first logger, ``{default_root_dir}/checkpoints``."""
    from ..loggers.layout import checkpoint_search_folders as folders

    callback = trainer.checkpoint_callback
    return folders(trainer.default_root_dir, trainer.loggers, callback.dirpath if callback is not None else None)


def continue_logged_run(trainer: TrainerParts, path: str | None) -> None:
    """``fit(ckpt_path=...)``: before anything of the run is set up or written, each logger takes the version the
    checkpoint was written under, and drops what the interrupted run logged after its step (see
    ``Logger.continue_run``). So the resumed run's logs continue the same ``version_{n}``, and its default
    checkpoint folder is that version's ``checkpoints`` (Lightning starts a new version instead).

    Only a logger whose ``{save_dir}/{name}`` is the folder the checkpoint recorded continues: a checkpoint brought
    from another experiment or machine must not append to (and purge) an unrelated run that has the same number.
    Every process reads the same checkpoint, so the versions stay agreed. ``path``: the checkpoint as
    ``checkpointing.resolve_ckpt`` found it; nothing happens without one (the fit passes None for
    ``ckpt_path="best"``: this Trainer's own run), without loggers, or for a checkpoint that recorded no loggers.
    """
    if not trainer.loggers or path is None or trainer.state.fn is not None:
        return
    recorded = recorded_logger_runs(path)
    if recorded is None:
        return
    runs, step = recorded
    for logger, run in zip(trainer.loggers, runs):
        if run is not None and owns_folder(logger) and logger.root_dir is not None and run[1] == os.path.abspath(logger.root_dir):
            logger.continue_run(run[0], step)


def recorded_logger_runs(path: str) -> tuple[list[tuple[int | str, str] | None], int] | None:
    """The ``(version, root_dir)`` of each logger a Trainer checkpoint folder recorded, and its optimizer step;
    None when it holds no readable Trainer state (the restore reports why)."""
    from ..accelerator import load_tree, verify_checkpoint
    from .checkpointing import payload_logger_runs

    if not os.path.isfile(os.path.join(path, TRAINER_STATE_FILE)):
        return None
    try:
        verify_checkpoint(path, files=[TRAINER_STATE_FILE])
    except (ValueError, OSError):  # damaged or incomplete: resuming from it fails with the full message
        return None
    return payload_logger_runs(load_tree(os.path.join(path, TRAINER_STATE_FILE)))


def make_accelerator(accelerator: str, devices: int | str | list[int], strategy: Any, accumulate: int,
                     precision: str, root: str, own_samplers: bool,
                     cls: type[Accelerator] = Accelerator) -> tuple[Accelerator, int]:
    """The Trainer's Accelerator and the processes per node. Makes this job ``devices`` processes first (under
    torchrun: checks the count; from a plain ``python script.py`` with devices > 1: re-runs the script in that many
    processes; ``strategy="ddp_spawn"``: neither, a one-process Accelerator here). ``cls``: the Accelerator class
    (``stoker.Trainer``'s answers Accelerate's names too)."""
    from . import args as check
    from .spawn import check_spawn, start_method

    accumulate = check.accumulation_steps("accumulate", accumulate)  # stored by the Accelerator only
    cpu = check.accelerator_choice(accelerator)
    per_node = resolve_num_processes(devices, accelerator.lower())
    if start_method(strategy) is None:
        ensure_processes(per_node)
    else:  # "ddp_spawn": this process stays one; the workers start at each stage (spawn.py)
        check_spawn(strategy, per_node)
        strategy = "auto"
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
