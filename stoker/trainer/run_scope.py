"""One ``fit`` / ``validate`` / ``test`` / ``predict`` call from its start to its end: the scope the entry points of
``trainer.py`` run in.

Owns: one call at a time, the module's callbacks merged in and the hook table built, the data module's and the
hooks' ``setup`` / ``teardown``, ``on_exception``, the loggers' ``finalize`` with the run's status, the
checkpoint folders given back, the profiler started and stopped, and the run's report said last (``run_report.py``: after teardown, so the progress
bars are closed when the closing line is printed).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..loggers.foreign import first_log_dir
from .datamodule import DataModule
from .hooks import HookDispatcher, merge_module_callbacks

if TYPE_CHECKING:
    from .module import TrainingModule
    from .parts import TrainerParts


@contextlib.contextmanager
def run_scope(trainer: TrainerParts, fn: str, module: TrainingModule, datamodule: DataModule | None = None
              ) -> Iterator[None]:
    """Runs the body as ``trainer``'s ``fn`` call (see the module docstring); re-raises what the body raised."""
    t = trainer
    if t.state.fn is not None:
        raise RuntimeError(f"Trainer.{fn}() was called while Trainer.{t.state.fn}() is running; a Trainer "
                           "runs one thing at a time.")
    t.state.fn, t.state.status = fn, "running"
    for metrics in (t.callback_metrics, t.logged_metrics, t.progress_bar_values):  # each run reports its own
        metrics.clear()
    t.module = module
    module.trainer = t
    if fn == "fit":
        t.should_stop = False
    t.callbacks = merge_module_callbacks(t.callbacks, module)  # module.configure_callbacks()
    t.hooks = HookDispatcher(t, module, t.callbacks)
    status, error = "success", None
    t.run_report.begin()
    if t.profiler is not None:
        t.profiler.run_start(fn)
        t.profiler.watch(datamodule, DataModule)
    try:
        t.run_setup.start_datamodule(datamodule, module, fn)  # prepare_data once per node, its setup(fn)
        t.hooks.call("setup", stage=fn)
        yield
    except BaseException as exception:
        status = "interrupted" if isinstance(exception, (KeyboardInterrupt, SystemExit)) else "failed"
        error = exception
        t.hooks.call("on_exception", exception)
        if datamodule is not None:
            datamodule.on_exception(exception)
        raise
    finally:
        try:
            _end_run(t, fn, module, datamodule, status)
        finally:
            if t.profiler is not None:  # its table before the closing line, which stays the run's last word
                folder = first_log_dir(t.loggers) or t.default_root_dir
                rank = t.accelerator.process_index if t.accelerator.num_processes > 1 else None  # a file each
                t.profiler.run_stop(fn, os.path.abspath(folder), rank)  # Lightning's trainer.log_dir
            t.run_report.finish(fn, error)


def _end_run(t: TrainerParts, fn: str, module: TrainingModule, datamodule: DataModule | None, status: str) -> None:
    try:
        if datamodule is not None:
            datamodule.teardown(stage=fn)
        t.hooks.call("teardown", stage=fn)
    finally:
        t.state.fn = t.state.stage = None
        t.state.status = "finished" if status == "success" else status
        t.run_setup.teardown(module)
        try:
            if t.is_global_zero:
                for logger in t.loggers:
                    logger.finalize(status)
        finally:
            # Folders that checkpoints replaced are deleted in the background: gone when fit returns; the
            # checkpoint folders this run held are free for the next run (also when a logger's finalize raised).
            t.accelerator.release_checkpoint_folders()
