"""The evaluation loops: ``validation_step`` / ``test_step`` over their loaders (inside ``fit`` too), and
``predict_step``.

Owns: eval mode and ``torch.no_grad`` around them (train mode restored module by module after), the precision's
autocast, the stage's hooks in order (names from the stage table, ``stages.py``), and the per-loader results.
Does not own: when a validation runs inside ``fit`` (``loops.py``) or which loaders and limits (``setup.py``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from ..accelerator import capture_rng_state, restore_rng_state
from .logging import Results
from .mode_hooks import overrides_train_hook
from .stages import PREDICT, STAGES, TRAIN, VALIDATE

if TYPE_CHECKING:
    from .parts import LoopPosition, TrainerParts
    from .run import FitRun


def run_evaluation(trainer: TrainerParts, stage: str, loaders: list[Any],
                   counter: LoopPosition | None = None) -> list[dict[str, float]]:
    """Runs ``stage``'s step (``"validate"``: ``validation_step``, ``"test"``: ``test_step``) over ``loaders`` in
    eval mode without gradients.

    Returns one dict per loader with its epoch metrics (floats). Train mode is restored afterwards,
    module by module (a frozen BatchNorm stays in eval mode). ``counter``: a fit's loop, whose
    ``validation_count`` counts this run once its values are published, before its ``on_validation_end``.
    """
    table = STAGES[stage]
    step_fn = getattr(trainer.module, table.step)
    results = Results(trainer, stage)
    multiple = len(loaders) > 1
    call = trainer.hooks.call
    batch_start, batch_end = table.hook("batch_start"), table.hook("batch_end")
    previous, trainer.results = trainer.results, results
    try:
        with _eval_mode(trainer.module, table.prefix), trainer.accelerator.autocast():
            call(table.hook("start"))
            call(table.hook("epoch_start"))
            for i, loader in enumerate(loaders):
                results.suffix = f"/dataloader_idx_{i}" if multiple else ""
                extra = (i,) if multiple else ()
                for batch_idx, batch in enumerate(loader):
                    results.batch = batch
                    call(batch_start, batch, batch_idx, *extra)
                    outputs = step_fn(batch, batch_idx, *extra)
                    call(batch_end, outputs, batch, batch_idx, *extra)
                    if results.step_values:  # self.log(on_step=True) here: a point per batch, on the stage's axis
                        trainer.send_to_loggers(results.pop_step_values(), step=trainer.eval_log_steps.get(stage, 0))
                        trainer.eval_log_steps[stage] = trainer.eval_log_steps.get(stage, 0) + 1
            results.suffix = ""
            call(table.hook("epoch_end"))
            values = results.publish_epoch()
            trainer.send_to_loggers(values)
            results.reset_epoch()  # torchmetrics are computed and reset at each evaluation's end (synced then)
            if counter is not None:
                counter.validation_count += 1
            call(table.hook("end"))
    finally:
        trainer.results = previous
    out: list[dict[str, float]] = [{} for _ in loaders]
    for name, value in values.items():
        index = int(name.rsplit("_", 1)[1]) if multiple and "/dataloader_idx_" in name else None
        for i in range(len(loaders)) if index is None else [index]:
            out[i][name] = float(value)
    return out


def run_predict(trainer: TrainerParts, loaders: list[Any]) -> list[Any]:
    """Runs ``predict_step`` over ``loaders``; a list of outputs (a list of lists for several loaders)."""
    call = trainer.hooks.call
    multiple = len(loaders) > 1
    step_fn = getattr(trainer.module, PREDICT.step)
    batch_start, batch_end = PREDICT.hook("batch_start"), PREDICT.hook("batch_end")
    outputs: list[list[Any]] = []
    previous, trainer.results = trainer.results, Results(trainer, PREDICT.name)
    try:
        with _eval_mode(trainer.module, PREDICT.prefix), trainer.accelerator.autocast():
            call(PREDICT.hook("start"))
            call(PREDICT.hook("epoch_start"))
            for i, loader in enumerate(loaders):
                extra = (i,) if multiple else ()
                mine: list[Any] = []
                for batch_idx, batch in enumerate(loader):
                    call(batch_start, batch, batch_idx, *extra)
                    prediction = step_fn(batch, batch_idx, *extra)
                    call(batch_end, prediction, batch, batch_idx, *extra)
                    mine.append(prediction)
                outputs.append(mine)
            call(PREDICT.hook("epoch_end"))
            call(PREDICT.hook("end"))
    finally:
        trainer.results = previous
    return outputs if multiple else outputs[0]


def run_sanity_check(trainer: TrainerParts, run: FitRun) -> None:
    """``RunOptions.num_sanity_val_steps``: that many batches of each val loader before training (not logged, RNG
    states restored after, skipped on resume), with ``on_sanity_check_start``/``_end`` around it."""
    t = trainer
    steps = t.options.num_sanity_val_steps
    if not run.val_enabled or steps == 0 or t.global_step > 0 or t.fit_loop.epoch > 0:
        return
    states = capture_rng_state()
    loaders: list[Any] = []
    limits: list[Any] = []
    t.sanity_checking, t.state.stage = True, VALIDATE.name  # send_to_loggers sends nothing meanwhile
    try:
        t.hooks.call("on_sanity_check_start")
        loaders = t.run_setup.val_loaders(run)  # the val loaders are asked for here (Lightning's moment)
        limits = [loader.max_batches for loader in loaders]
        for loader, n in zip(loaders, t.num_val_batches):
            loader.limit_batches(None if steps is None else int(min(steps, n)))
        if loaders:
            run_evaluation(t, VALIDATE.name, loaders)
        t.hooks.call("on_sanity_check_end")
    finally:
        t.sanity_checking, t.state.stage = False, TRAIN.name
        for loader, limit in zip(loaders, limits):
            loader.limit_batches(limit)
        restore_rng_state(states)
        t.callback_metrics.clear()
        t.logged_metrics.clear()
        t.progress_bar_values.clear()


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module, prefix: str):  # noqa: ANN202 - a context manager
    """Eval mode and no gradients for a ``prefix`` stage, through the module's mode hooks (``mode_hooks.py``): a
    module that is not a TrainingModule is put in eval mode and back."""
    modes = [(m, m.training) for m in module.modules()]
    eval_hook = getattr(module, f"on_{prefix}_model_eval", None)
    if callable(eval_hook):
        eval_hook()
    else:
        module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if overrides_train_hook(module, prefix):
            getattr(module, f"on_{prefix}_model_train")()
        else:
            for m, mode in modes:
                m.training = mode
