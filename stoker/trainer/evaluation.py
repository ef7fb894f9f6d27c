"""The evaluation loops: ``validation_step`` / ``test_step`` over their loaders (inside ``fit`` too), and
``predict_step``.

Owns: eval mode and ``torch.no_grad`` around them (train mode restored module by module after), the precision's
autocast, the stage's hooks in order (names from the stage table, ``stages.py``), the per-loader results, and the
sample indices of each predict batch (recorded by the loader's batch sampler for ``BasePredictionWriter``).
Does not own: when a validation runs inside ``fit`` (``loops.py``) or which loaders and limits (``setup.py``).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..accelerator import kept_rng_state
from ..user_frame import user_stacklevel
from .hooks import batch_mover, clear_gradients, overrides
from .logging import Results
from .mode_hooks import overrides_train_hook
from .stages import PREDICT, STAGES, TRAIN, VALIDATE
from .states import RunningStage
from .batch_iter import check_predict, run_eval_steps
from .iterables import batch_count
from .step_args import stage_step, takes_iterator

if TYPE_CHECKING:
    from .parts import LoopPosition, TrainerParts
    from .run import FitRun


def run_evaluation(trainer: TrainerParts, stage: str, loaders: list[Any],
                   counter: LoopPosition | None = None) -> list[dict[str, float]]:
    """Runs ``stage``'s step (``"validate"``: ``validation_step``, ``"test"``: ``test_step``) over ``loaders`` in
    eval mode without gradients; returns one dict per loader with its epoch metrics (floats). Train mode is restored
    afterwards, module by module (a frozen BatchNorm stays in eval mode). ``counter``: a fit's loop, whose
    ``validation_count`` counts this run once its values are published, before ``on_validation_end``.
    """
    if _no_batches(loaders):  # limit_*_batches=0: the stage is skipped, its hooks and mode switch too
        return [{} for _ in loaders]
    table = STAGES[stage]
    step_fn = stage_step(trainer.module, table, len(loaders) > 1)
    iterator = takes_iterator(getattr(trainer.module, table.step))
    results = Results(trainer, stage)
    results.in_batch = False
    call = trainer.hooks.call
    previous, trainer.results = trainer.results, results
    if counter is not None:  # a validation inside fit (not the sanity check): the module's gradients cleared
        _validation_zero_grad(trainer.module, counter)
    try:
        with _eval_mode(trainer.module, table.prefix, train_back=True, inference=_inference(trainer)), \
                trainer.accelerator.autocast():
            call(table.hook("start"))
            call(table.hook("epoch_start"))
            _run_steps(trainer, stage, loaders, step_fn, results, iterator)
            results.suffix, results.in_batch = "", False
            if trainer.hooks.has(table.hook("epoch_end")):  # values read there: published first (Lightning's)
                results.publish_epoch()
            call(table.hook("epoch_end"))
            values = results.publish_epoch()  # again: with what those hooks logged
            trainer.send_to_loggers(values)
            results.reset_epoch()  # torchmetrics are computed and reset at each evaluation's end (synced then)
            if counter is not None:
                counter.validation_count += 1
            call(table.hook("end"))
    finally:
        trainer.results = previous
    return _per_loader(values, len(loaders), results.loader_names)


def _run_steps(trainer: TrainerParts, stage: str, loaders: list[Any], step_fn: Callable[..., Any], results: Results,
               iterator: bool) -> None:
    """Each loader's batches through ``stage``'s step between its batch hooks, the per-batch values to the loggers;
    a ``dataloader_iter`` step (``iterator``) pulls the batches itself (``batch_iter.py``)."""
    table, call, multiple = STAGES[stage], trainer.hooks.call, len(loaders) > 1
    batch_start, batch_end = table.hook("batch_start"), table.hook("batch_end")

    current = [0]  # the loader of the batch in flight

    def pulled(i: int, batch: Any) -> None:  # what self.log in the step weighs by and which loader it names
        results.batch, results.suffix, results.in_batch = batch, f"/dataloader_idx_{i}" if multiple else "", True
        current[0] = i

    def end(outputs: Any, *args: Any) -> None:
        call(batch_end, outputs, *args)
        if results.step_values:  # self.log(on_step=True) here: a point per batch, on its loader's own axis
            values, key = results.pop_step_values(), (stage, current[0])
            if not trainer.sanity_checking:  # the sanity check logs nothing and leaves the axes as they are
                trainer.send_to_loggers(values, step=trainer.eval_log_steps.get(key, 0))
                trainer.eval_log_steps[key] = trainer.eval_log_steps.get(key, 0) + 1

    for loader in loaders:
        _follow_epoch(loader, trainer.current_epoch)
    if iterator:
        run_eval_steps(loaders, step_fn, functools.partial(call, batch_start), end, pulled)
        return
    for i, loader in enumerate(loaders):
        extra = (i,) if multiple else ()
        move = batch_mover(trainer.module, loader, trainer.accelerator, trainer.datamodule)
        for batch_idx, batch in enumerate(loader):
            if move is not None:
                batch = move(batch, i)
            pulled(i, batch)
            call(batch_start, batch, batch_idx, *extra)
            outputs = step_fn(batch, batch_idx, *extra)
            end(outputs, batch, batch_idx, *extra)


def _follow_epoch(loader: Any, epoch: int) -> None:
    """An eval loader that takes ``set_epoch`` (its sampler's, for a prepared loader) gets the fit's epoch, as a train
    loader does: a shuffling eval sampler draws each epoch's order, the same one in every process."""
    if callable(getattr(loader, "set_epoch", None)):
        loader.set_epoch(epoch)


def _loader_index(name: str) -> int:
    """``i`` of a name holding ``/dataloader_idx_{i}``."""
    return int(name.partition("/dataloader_idx_")[2])


def _per_loader(values: dict[str, Any], count: int, loader_names: dict[str, set[str]]) -> list[dict[str, float]]:
    """An evaluation's epoch values as one dict per loader: a ``/dataloader_idx_N`` name goes to loader N only, a
    name logged with ``add_dataloader_idx=False`` to the loaders it was logged from, any other to every loader."""
    out: list[dict[str, float]] = [{} for _ in range(count)]
    for name, value in values.items():
        if count > 1 and "/dataloader_idx_" in name:
            indices = [_loader_index(name)]
        elif count > 1 and name in loader_names:
            indices = sorted(_loader_index(suffix) for suffix in loader_names[name])
        else:
            indices = list(range(count))
        for i in indices:
            out[i][name] = float(value)
    return out


def run_predict(trainer: TrainerParts, loaders: list[Any]) -> list[Any]:
    """Runs ``predict_step`` over ``loaders``; a list of outputs (a list of lists for several loaders)."""
    if _no_batches(loaders):  # limit_predict_batches=0: skipped, hooks included
        return [[] for _ in loaders] if len(loaders) > 1 else []
    call = trainer.hooks.call
    multiple = len(loaders) > 1
    step_fn = stage_step(trainer.module, PREDICT, multiple)
    iterator = takes_iterator(trainer.module.predict_step)
    if iterator:
        check_predict(trainer)
    previous, trainer.results = trainer.results, Results(trainer, PREDICT.name)
    trainer.stage_record.batch_indices = [[] for _ in loaders]
    try:
        # train_back=False: after predicting, as in Lightning, each sub-module gets its own mode back and
        # on_predict_model_train is not called
        with _eval_mode(trainer.module, PREDICT.prefix, train_back=False, inference=_inference(trainer)), \
                trainer.accelerator.autocast():
            call(PREDICT.hook("start"))
            call(PREDICT.hook("epoch_start"))
            if iterator:
                outputs = run_eval_steps(loaders, step_fn, functools.partial(call, PREDICT.hook("batch_start")),
                                         functools.partial(call, PREDICT.hook("batch_end")), lambda i, batch: None)
            else:
                outputs = [_predict_loader(trainer, loader, i, step_fn, multiple) for i, loader in enumerate(loaders)]
            call(PREDICT.hook("epoch_end"))
            call(PREDICT.hook("end"))
    finally:
        trainer.results, trainer.stage_record.batch_indices = previous, []
    _warn_empty_predictions(trainer.module, outputs)
    return outputs if multiple else outputs[0]


def _predict_loader(trainer: TrainerParts, loader: Any, i: int, step_fn: Callable[..., Any],
                    multiple: bool) -> list[Any]:
    """The predictions of loader ``i``'s batches, between the batch hooks."""
    from ..callbacks.prediction_writer import BasePredictionWriter  # loaded lazily, as stoker.callbacks does

    call, extra, mine = trainer.hooks.call, ((i,) if multiple else ()), []
    indices = trainer.stage_record.batch_indices[i]
    batch_start, batch_end = PREDICT.hook("batch_start"), PREDICT.hook("batch_end")
    # Only a prediction writer reads the batches' sample indices: without one the sampler keeps its fast path.
    record = any(isinstance(c, BasePredictionWriter) for c in trainer.callbacks)
    move = batch_mover(trainer.module, loader, trainer.accelerator, trainer.datamodule)
    with _recording_indices(loader if record else None) as recorded:
        for batch_idx, batch in enumerate(loader):
            if recorded is not None:  # by position: the sampler may be ahead of the batches (prefetching)
                indices.append(recorded[batch_idx] if batch_idx < len(recorded) else None)
            if move is not None:
                batch = move(batch, i)
            call(batch_start, batch, batch_idx, *extra)
            prediction = step_fn(batch, batch_idx, *extra)
            call(batch_end, prediction, batch, batch_idx, *extra)
            mine.append(prediction)
    return mine


def _warn_empty_predictions(module: Any, outputs: list[list[Any]]) -> None:
    """One warning when ``predict_step`` returned None for some batches: often a forgotten ``return``."""
    empty = sum(prediction is None for mine in outputs for prediction in mine)
    if empty:
        warnings.warn(f"{type(module).__name__}.predict_step returned None for {empty} batch(es): Trainer.predict "
                      "returns None in their place. If that is on purpose, ignore this warning; otherwise return "
                      "the predictions.", UserWarning, stacklevel=user_stacklevel())


@contextlib.contextmanager
def _recording_indices(loader: Any):  # noqa: ANN202 - a context manager
    """While ``loader`` is read for predict, its batch sampler keeps the dataset indices of every batch it hands out
    (``recorded``, in order: entry ``batch_idx`` belongs to that batch), which ``BasePredictionWriter`` passes on
    as ``batch_indices``; the list is what the ``with`` gives. A loader without one (an iterable dataset), or None,
    records nothing (and gives None)."""
    sampler = getattr(loader, "sharded_sampler", None)
    if sampler is None:
        yield None
        return
    sampler.recorded = []
    try:
        yield sampler.recorded
    finally:
        sampler.recorded = None


def run_sanity_check(trainer: TrainerParts, run: FitRun) -> None:
    """``RunOptions.num_sanity_val_steps``: that many batches of each val loader before training (not logged, RNG
    states restored after, skipped on resume), with ``on_sanity_check_start``/``_end`` around it. First, with or
    without a sanity check, the fit's gradients are cleared (Lightning's ``zero_grad()`` after ``on_fit_start``)."""
    t = trainer
    clear_gradients(t.module, t.accelerator)
    steps = t.options.num_sanity_val_steps
    if not run.val_enabled or steps == 0 or t.global_step > 0 or t.fit_loop.epoch > 0:
        return
    loaders: list[Any] = []
    limits: list[Any] = []
    t.state.stage = RunningStage.SANITY_CHECKING  # trainer.sanity_checking; send_to_loggers sends nothing meanwhile
    with kept_rng_state():  # what the check draws leaves no trace in the fit's random states
        try:
            t.hooks.call("on_sanity_check_start")
            loaders = t.run_setup.val_loaders(run)  # the val loaders are asked for here (Lightning's moment)
            limits = [loader.max_batches for loader in loaders]
            for loader in loaders:  # each loader's own count (a CombinedLoader's: its combined batches), within its
                if steps is not None:  # limit_val_batches; -1 (None): all of them, still within that limit
                    loader.limit_batches(int(min(steps, batch_count(loader))))
            if loaders:
                run_evaluation(t, VALIDATE.name, loaders)
            t.hooks.call("on_sanity_check_end")
        finally:
            t.state.stage = TRAIN.name
            for loader, limit in zip(loaders, limits):
                loader.limit_batches(limit)
            t.callback_metrics.clear()
            t.logged_metrics.clear()
            t.progress_bar_values.clear()


def _no_batches(loaders: list[Any]) -> bool:
    """Every loader is limited to zero batches (a loader without a limit, e.g. a CombinedLoader, counts as some);
    none at all when the stage's limit kept it from asking for them."""
    return not loaders or all(getattr(loader, "max_batches", None) == 0 for loader in loaders)


def _validation_zero_grad(module: torch.nn.Module, loop: LoopPosition) -> None:
    """``on_validation_model_zero_grad`` when overridden; otherwise the gradients are cleared unless an
    accumulation window is still open (a validation between its batches must not drop what it gathered)."""
    if overrides(module, "on_validation_model_zero_grad"):
        module.on_validation_model_zero_grad()
    elif loop.window_closed or loop.batches_done == 0:
        module.zero_grad()


def _inference(trainer: TrainerParts) -> bool:
    """Whether this evaluation runs under ``torch.inference_mode``: asked for, and not a validation inside fit."""
    return trainer.options.inference_mode and trainer.state.fn != "fit"


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module, prefix: str, train_back: bool, inference: bool = False):  # noqa: ANN202
    """Eval mode and no gradients for a ``prefix`` stage, through the module's mode hooks (``mode_hooks.py``): a
    module that is not a TrainingModule is put in eval mode and back. ``train_back``: an overridden
    ``on_{prefix}_model_train`` decides the mode afterwards. ``inference``: ``torch.inference_mode`` rather than
    ``torch.no_grad`` (``RunOptions.inference_mode``, for a stage run on its own)."""
    modes = [(m, m.training) for m in module.modules()]
    eval_hook = getattr(module, f"on_{prefix}_model_eval", None)
    if callable(eval_hook):
        eval_hook()
    else:
        module.eval()
    try:
        with torch.inference_mode() if inference else torch.no_grad():
            yield
    finally:
        if train_back and overrides_train_hook(module, prefix):
            getattr(module, f"on_{prefix}_model_train")()
        else:
            for m, mode in modes:
                m.training = mode
