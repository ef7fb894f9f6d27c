"""Where a Trainer run keeps its checkpoints, relative to its logs.

This module owns the default checkpoint folder of a run and the folders ``fit(ckpt_path="last")`` searches. A run
with a logger keeps everything in one folder, as Lightning's does::

    {default_root_dir}/stoker_logs/version_3/
        events.out.tfevents.*   metrics.csv   hparams.yaml      the loggers' files
        checkpoints/epoch=1-step=8/   checkpoints/last/          ModelCheckpoint's default dirpath

The folder is the *first* logger's ``{save_dir}/{name}/{version}`` (not its ``log_dir``, which may add a
``sub_dir``); a run without a logger uses ``{default_root_dir}/checkpoints``. An explicit
``ModelCheckpoint(dirpath=...)`` wins over both. Runs written before checkpoints moved under the version folder
kept them in ``{default_root_dir}/checkpoints``; that folder is still searched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stoker.loggers.folders import attribute_type_error, free_version_under
from stoker.loggers.foreign import owns_folder

if TYPE_CHECKING:
    from stoker.loggers.base import Logger

__all__ = ["CHECKPOINTS", "checkpoint_search_folders", "default_checkpoint_dir"]

CHECKPOINTS = "checkpoints"  # the sub-folder name, as Lightning's


def default_checkpoint_dir(default_root_dir: str | os.PathLike, loggers: Sequence[Logger]) -> str:
    """The absolute folder a run's checkpoints go to when ``ModelCheckpoint`` is given no ``dirpath``:
    ``{version_dir}/checkpoints`` of the first logger, else ``{default_root_dir}/checkpoints``.

    Reading the first logger's version chooses it (the next free one, unless given or continued from a
    checkpoint), so call this only once the run's versions are settled: the Trainer settles them before the
    callbacks' ``setup``.
    """
    loggers = [lg for lg in loggers if owns_folder(lg)]  # a foreign logger (only called) has no folder here
    if loggers:
        return os.path.abspath(os.path.join(_run_folder(loggers[0], default_root_dir), CHECKPOINTS))
    return os.path.abspath(os.path.join(os.fspath(default_root_dir), CHECKPOINTS))


def _run_folder(logger: Logger, default_root_dir: str | os.PathLike) -> str:
    """The logger's ``version_dir``; for a logger that keeps no local files (``save_dir`` None) the same folders
    under ``default_root_dir``: ``{default_root_dir}/{name}/{version folder}``, as Lightning places them."""
    folder = logger.version_dir
    if folder is None:
        experiment = _experiment_folder(logger, default_root_dir)
        if not logger.version_chosen:  # numbered where its run's folder will be, so runs do not share one
            logger.version = free_version_under(experiment)
        folder = os.path.join(experiment, logger.version_folder)
    return folder


def _experiment_folder(logger: Logger, default_root_dir: str | os.PathLike) -> str:
    """The logger's ``root_dir``, or ``{default_root_dir}/{name}`` when it has none."""
    root, name = logger.root_dir, logger.name
    if name is not None and not isinstance(name, str):
        raise attribute_type_error(logger, "name", name, "a str")
    if root is None:
        root = os.path.join(os.fspath(default_root_dir), name) if name else os.fspath(default_root_dir)
    return root


def checkpoint_search_folders(default_root_dir: str | os.PathLike, loggers: Sequence[Logger],
                              dirpath: str | None = None) -> list[str]:
    """The folders whose checkpoints ``ckpt_path="last"`` chooses among: the ModelCheckpoint's ``dirpath`` (when
    known), the ``checkpoints`` folder of every version of the first logger (earlier runs of the experiment), and
    ``{default_root_dir}/checkpoints`` (runs without a logger, and runs written before the per-version layout).

    Only folders are listed here; which checkpoint wins (the one saved last) is
    ``stoker.trainer.checkpointing.find_last_checkpoint``'s rule. Scanning the version folders does not choose the
    logger's version.
    """
    folders = [dirpath] if dirpath else []
    loggers = [lg for lg in loggers if owns_folder(lg)]
    if loggers:
        root = _experiment_folder(loggers[0], default_root_dir)
        try:
            with os.scandir(root) as entries:
                # Every sub-folder, not only version_{n}: a string version names its folder freely.
                names = sorted(entry.name for entry in entries if entry.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            names = []
        folders += [os.path.join(root, name, CHECKPOINTS) for name in names]
    folders.append(os.path.join(os.fspath(default_root_dir), CHECKPOINTS))
    return [os.path.abspath(folder) for folder in dict.fromkeys(folders)]
