"""The Trainer's part of a checkpoint, resuming from one, and finding the newest one.

Owns: what the Trainer adds to an Accelerator ``save_state`` folder (loop position, callback states by
``state_key``, ``on_save_checkpoint`` extras, hyperparameters, epoch accumulators of ``self.log``), applying it
on resume (its first half, before ``configure_optimizers``: ``resume_first.py``), and the ``ckpt_path="last"``
lookup (preemption: ``preemption.py``). Does not own the folder format
or its atomicity (``stoker/accelerator/checkpointing/``).

Layout (``stoker.loggers.layout``; the run's checkpoints folder is ``ModelCheckpoint``'s default ``dirpath``)::

    {default_root_dir}/stoker_logs/version_N/checkpoints/last.ckpt/   newest state (save_last=True, preemption)
    {default_root_dir}/stoker_logs/version_N/checkpoints/epoch=3-step=400.ckpt/   ModelCheckpoint's top-k folders
    {default_root_dir}/checkpoints/...            the same without a logger (and runs of the older layout)

``ckpt_path="last"`` takes, among the complete checkpoint folders there (every version's, and the
ModelCheckpoint's own ``dirpath``), the one saved last (the time each save records; ties go to ``last``, then to
more optimizer steps).
Not the one with the most steps: a folder may still hold an earlier run's checkpoints (a fresh ``fit`` into the
same ``default_root_dir``, or a run continued from an older checkpoint), and a crash of the new run must resume the
new run, not jump to the old one's end.
"""

from __future__ import annotations

import ast
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

# checkpoint_step: what tests and callbacks import from here (the engine's count of a folder's optimizer steps)
from ..accelerator import check_folder_free
from ..callbacks.hparams_file import plain_form
from ..accelerator import checkpoint_step  # noqa: F401 - re-exported
from ..loggers.foreign import owns_folder
from ..user_frame import user_stacklevel
from .hook_checkpoint import add_views, without_views
from .hparams import container_keys, not_checkpointable
from .iterables import IterableLoader
from ..accelerator import is_torch_file

if TYPE_CHECKING:
    from .parts import TrainerParts

LAST = "last"
LAST_FOLDER = "last.ckpt"  # the folder ModelCheckpoint(save_last=True), preemption and Timer write
BEST = "best"
_FORMAT = "stoker-trainer"


class NoModuleError(RuntimeError, AttributeError):
    """``Trainer.save_checkpoint`` called before a module was attached: a wrong call order (``RuntimeError``), and the
    ``AttributeError`` Lightning raises for it, so a renamed script's ``except AttributeError`` still catches it."""


class TrainerCheckpointState:
    """Registered once with the Trainer's Accelerator: every ``save_state`` stores the Trainer's state with it, and
    a ``load_state`` hands it back here (:meth:`take_loaded` gives it to the resume, once)."""

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        self.loaded: dict[str, Any] | None = None  # the state the last load_state read, until taken

    def state_dict(self) -> dict[str, Any]:
        return build_payload(self.trainer)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("format") != _FORMAT:
            raise ValueError(f"The Trainer state in this checkpoint has format {state.get('format')!r}, expected "
                             f"{_FORMAT!r}: it was not written by a stoker Trainer.")
        self.loaded = dict(state)

    def take_loaded(self) -> dict[str, Any] | None:
        """The state the last ``load_state`` read (None: it held none), forgotten here once taken."""
        loaded, self.loaded = self.loaded, None
        return loaded


def build_payload(trainer: TrainerParts) -> dict[str, Any]:
    """The Trainer's state: the dict the ``on_save_checkpoint`` hooks got (Lightning's keys, ``hook_checkpoint.py``)
    with what they added, and beside it the Trainer's own bookkeeping."""
    module = trainer.module
    hparams = dict(getattr(module, "hparams", {}) or {})
    checkpoint: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "loops": {"fit_loop": trainer.fit_loop.state_dict()},
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
    }
    if hparams:
        checkpoint["hyper_parameters"] = storable(hparams)
        checkpoint.update(container_keys(module))
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None:  # its state and hyperparameters travel with the run
        checkpoint["datamodule"] = datamodule.state_dict()
        checkpoint["datamodule_hyper_parameters"] = storable(dict(getattr(datamodule, "hparams", {}) or {}))
        checkpoint.update(container_keys(datamodule, "datamodule_"))
    if trainer.hooks is not None and trainer.hooks.has("on_save_checkpoint"):  # the views only for a hook to read
        add_views(checkpoint, module, trainer.prepared_optimizers, [c.scheduler for c in trainer.lr_scheduler_configs])
        trainer.hooks.call("on_save_checkpoint", checkpoint)
        checkpoint = without_views(checkpoint, "on_save_checkpoint")
    own = {
        "hyper_parameters_not_stored": not_checkpointable(hparams),
        "results": trainer.train_results.state_dict(),
        # The latest values, so that a resumed run's epoch-end (a ReduceLROnPlateau step) and callbacks see them.
        "callback_metrics": {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
                             for k, v in trainer.callback_metrics.items() if isinstance(v, (torch.Tensor, int, float))},
        # Schedulers that are not torch's (stepped by the module) are not the Accelerator's to save: their states here.
        "other_schedulers": [_state_of(c.scheduler) for c in trainer.lr_scheduler_configs if not c.is_torch_scheduler],
        # A train loader that is not one DataLoader: where its epoch began, so that a resume can read it again, and
        # its loaders' global batch sizes, so that it can tell whether its steps are the saving run's.
        **_train_loader_entries(getattr(trainer.fit_run, "train_loader", None)),
    }
    # Each logger's version and folder (None: no version chosen yet): a resumed run continues them (components.py).
    runs = [{"version": lg.version, "root_dir": os.path.abspath(lg.root_dir)}
            if owns_folder(lg) and lg.version_chosen and lg.root_dir is not None else None for lg in trainer.loggers]
    return {"format": _FORMAT, "version": 1, "checkpoint": checkpoint, "trainer": own, "logger_runs": runs}


def _train_loader_entries(loader: Any) -> dict[str, Any]:
    if not isinstance(loader, IterableLoader):
        return {"train_loader": None}
    return {"train_loader": loader.epoch_start(), "train_loader_batches": loader.global_batches()}


def payload_logger_runs(payload: Any) -> tuple[list[tuple[int | str, str] | None], int] | None:
    """``([(version, root_dir) or None per logger], global_step)`` recorded in a Trainer state; None when it is
    not one or recorded no loggers (written before they were recorded)."""
    if not isinstance(payload, Mapping) or payload.get("format") != _FORMAT or "logger_runs" not in payload:
        return None
    runs = [(run["version"], str(run["root_dir"])) if isinstance(run, Mapping) else None
            for run in payload["logger_runs"]]
    return runs, int(payload["checkpoint"]["global_step"])


def apply_payload(trainer: TrainerParts, payload: Mapping[str, Any]) -> None:
    """Restores the loop's position, the states of schedulers that are not torch's and the epoch accumulators (the
    data module's and the callbacks' states and the ``on_load_checkpoint`` hooks came before ``configure_optimizers``,
    in ``resume_first.py``)."""
    from .loading import trainer_own

    checkpoint, own = trainer_own(payload)
    trainer.fit_loop.load_state_dict(checkpoint["loops"]["fit_loop"])
    others = [c.scheduler for c in trainer.lr_scheduler_configs if not c.is_torch_scheduler]
    for scheduler, state in zip(others, own.get("other_schedulers", [])):
        if state is not None and callable(getattr(scheduler, "load_state_dict", None)):
            scheduler.load_state_dict(state)
    trainer.train_results.load_state_dict(own.get("results", {}))
    trainer.callback_metrics.update(own.get("callback_metrics", {}))


def restore_param_groups(trainer: TrainerParts, states: Mapping[str, Any]) -> None:
    """Before the optimizers' state loads (it must find the same param groups): callbacks that add param groups during
    a fit (``BaseFinetuning``) add them again, from their state in the checkpoint (``states``: by ``same_key``, as
    ``resume_first.py`` read them), through ``restore_param_groups``."""
    for callback in trainer.callbacks:
        hook = getattr(callback, "restore_param_groups", None)
        if callable(hook) and states.get(same_key(callback.state_key)):
            hook(trainer, states[same_key(callback.state_key)])


def same_key(key: str) -> str:
    """A callback state key with its arguments sorted and the None ones left out, so that the keys of one callback
    match whichever order (Lightning's, or stoker's earlier sorted one) and defaults wrote them."""
    name, brace, args = key.partition("{")
    try:
        values = ast.literal_eval(brace + args) if brace else None
    except (ValueError, SyntaxError):
        return key
    if not isinstance(values, dict):
        return key
    return f"{name}{sorted((str(k), repr(v)) for k, v in values.items() if v is not None)}"


def _state_of(scheduler: Any) -> Any:
    """A scheduler's ``state_dict()`` when it has one (None otherwise)."""
    return scheduler.state_dict() if callable(getattr(scheduler, "state_dict", None)) else None


def storable(value: Any) -> Any:
    """``value`` with everything a checkpoint cannot hold safely turned into its ``repr`` (for hparams; the rule is
    ``hparams_file.plain_form``'s)."""
    return plain_form(value, for_json=False)[0]


# -- resuming -------------------------------------------------------------------------------------------------------
def resolve_ckpt(trainer: TrainerParts, ckpt_path: Any) -> str | None:
    """``ckpt_path`` as a folder: None stays None, ``"last"`` is looked up (None when there is none)."""
    if ckpt_path is None:
        return None
    if not isinstance(ckpt_path, (str, os.PathLike)):
        raise TypeError(f"ckpt_path={ckpt_path!r} ({type(ckpt_path).__name__}) is not a checkpoint. Expected one of: "
                        f"None (no checkpoint), {LAST!r} (the newest complete checkpoint under default_root_dir), "
                        f"{BEST!r} (the ModelCheckpoint's best_model_path), "
                        "or the path of a checkpoint folder (a str or os.PathLike).")
    if ckpt_path == LAST:
        last = trainer.find_last_checkpoint()
        if last is not None:  # never the folder of a run that is still writing it
            check_folder_free(os.path.dirname(last), f"fit(ckpt_path='last') found {last}, but its folder")
        return last
    if ckpt_path == BEST:
        return best_checkpoint(trainer)
    path = os.fspath(ckpt_path)
    if not os.path.isdir(path) and not is_torch_file(path):
        missing = "" if os.path.exists(path) else f"Checkpoint file not found: {path}. "  # Lightning's words first
        raise FileNotFoundError(f"{missing}ckpt_path={path!r} is not a checkpoint folder. Pass a folder written by "
                                "Trainer.save_checkpoint / ModelCheckpoint, 'last', 'best', None, or (validate, "
                                "test, predict) a single-file PyTorch checkpoint such as a Lightning .ckpt.")
    return path


def warn_no_last(trainer: TrainerParts, fn: str) -> None:
    """``ckpt_path="last"`` found nothing: not an error (a script may pass it before its first run), but a warning
    whose first sentences are Lightning's, so that a filter written for Lightning matches it."""
    warnings.warn(f'.{fn}(ckpt_path="last") is set, but there is no last checkpoint available. No checkpoint will be '
                  f"loaded: stoker found no complete checkpoint under {trainer.default_root_dir} (nor in the "
                  "ModelCheckpoint's dirpath).", UserWarning, stacklevel=user_stacklevel())


def _has_best(trainer: TrainerParts) -> bool:
    callback = trainer.checkpoint_callback
    return callback is not None and bool(callback.best_model_path) and os.path.exists(callback.best_model_path)


def best_checkpoint(trainer: TrainerParts) -> str:
    """``ckpt_path="best"``: the ``best_model_path`` of the Trainer's (first) ``ModelCheckpoint``."""
    callback = trainer.checkpoint_callback
    if callback is None:
        raise ValueError(f'`.{trainer.state.fn or "fit"}(ckpt_path="best")` is set but `ModelCheckpoint` is not '
                         "configured: ckpt_path='best' needs a ModelCheckpoint callback to know the best checkpoint, "
                         "and this Trainer has none (enable_checkpointing=False or fast_dev_run). Pass a checkpoint "
                         "folder, 'last', or add ModelCheckpoint(monitor=...).")
    path = callback.best_model_path
    if not path and callback.save_top_k == 0:
        raise ValueError("ckpt_path='best': the ModelCheckpoint is not configured to save the best checkpoint "
                         "(save_top_k=0). Give it save_top_k >= 1, or pass 'last' or a checkpoint folder.")
    if not path:
        raise ValueError("ckpt_path='best': the ModelCheckpoint has no best checkpoint yet (no checkpoint was saved "
                         "by this Trainer: run fit first, or resume a fit whose checkpoints it tracked). Pass a "
                         "checkpoint folder or 'last' instead.")
    if not os.path.isdir(path) and not os.path.isfile(path):
        raise FileNotFoundError(f"ckpt_path='best' is {path}, which no longer exists.")
    return path


def restore(trainer: TrainerParts, path: str | None, ckpt_path: Any, train_loader: Any,
            callback_states: Mapping[str, Any]) -> None:
    """Restores the full checkpoint ``path`` (``resolve_ckpt``'s answer for the fit's ``ckpt_path``) into the
    prepared fit; without one (``ckpt_path="last"`` and none there, or None): a fresh start, or where the Trainer's
    last fit stopped (``train_loader``, the new fit's, is moved there). ``callback_states``: the callbacks' saved
    states, as the resume's first half read them (``resume_first.py``)."""
    from .loading import trainer_own

    trainer.run_setup.ckpt_path = path
    if path is None:
        if ckpt_path is not None and trainer.is_global_zero:  # "last" and nothing there
            warn_no_last(trainer, "fit")
            print(f"stoker: ckpt_path={ckpt_path!r} found no complete checkpoint under {trainer.default_root_dir}; "
                  "starting from the beginning.", file=sys.stderr, flush=True)
        trainer.run_setup.continue_position(train_loader)
        return
    if not os.path.isdir(path):
        raise ValueError(
            f"fit(ckpt_path={path!r}): a single-file PyTorch checkpoint (e.g. a Lightning .ckpt) holds the weights and "
            "optimizer states, not what an exact resume needs (the loaders' positions, every random state), so a fit "
            "resumes only from a stoker checkpoint folder. To start from its weights, build the module with "
            "MyModule.load_from_checkpoint(path) and fit it without ckpt_path.")
    trainer.checkpoint_state.loaded = None
    try:
        restore_param_groups(trainer, callback_states)
        # extra_loaders: checkpoints of earlier versions also hold the val loaders' positions, after the train
        # loader's; validation starts its loaders afresh, so those are not read.
        strict = trainer.module.strict_loading if trainer.module is not None else True
        trainer.accelerator.load_state(path, extra_loaders=True, strict=strict)
    except ValueError as error:
        raise ValueError(f"Cannot resume from {path}: {error} (Trainer.fit prepares the module, each optimizer and "
                         "scheduler of configure_optimizers, and the train loader.)") from error
    payload = trainer.checkpoint_state.take_loaded()
    if payload is None:
        raise ValueError(f"{path} holds no Trainer state; it was written by Accelerator.save_state outside a "
                         "Trainer. Load it with trainer.accelerator.load_state instead.")
    apply_payload(trainer, payload)
    loop = trainer.fit_loop
    _continue_train_loader(trainer, train_loader, trainer_own(payload)[1])
    if trainer.is_global_zero:
        where = f"the end of epoch {loop.epoch}" if loop.phase == "end" or loop.epoch_batches_finished else \
            f"epoch {loop.epoch}, batch_idx {loop.batches_done}"
        print(f"stoker: resumed from checkpoint {os.path.abspath(path)}; continuing from global_step "
              f"{trainer.global_step} ({where}).", file=sys.stderr, flush=True)
    # the saved epoch has ended: fit starts at the next (saved by its validation: the loop runs its end hooks first)
    if loop.phase == "end" and loop.end_hooks_started and trainer.fit_run is not None:
        loop.end_epoch(trainer.fit_run)


def _continue_train_loader(trainer: TrainerParts, train_loader: Any, own: Mapping[str, Any]) -> None:
    """After the checkpoint's position is loaded: the train loader and the loop agree on the batch to continue from
    (``own``: the Trainer's part of the checkpoint, with what it kept of a train loader that is not one DataLoader)."""
    loop = trainer.fit_loop
    if getattr(train_loader, "rebased", False) and loop.phase == "batches" and \
            not loop.epoch_batches_finished and train_loader.epoch == loop.epoch:
        loop.batches_done = train_loader.batches_yielded  # saved by another process count: this process's count
    mid_epoch = loop.phase == "batches" and not loop.epoch_batches_finished and loop.batches_done > 0
    if not (mid_epoch and isinstance(train_loader, IterableLoader)):
        return
    saved = loop.batches_done
    loop.batches_done, problem = train_loader.resume(saved, own.get("train_loader"), own.get("train_loader_batches"))
    if problem is not None:
        warnings.warn(f"Resuming in the middle of epoch {loop.epoch} with a train {type(train_loader.source).__name__}"
                      f" that cannot be continued exactly: {problem}. This fit reads the epoch again and drops its "
                      f"first {loop.batches_done} batches, so it continues the interrupted fit exactly only if they "
                      "are the batches that fit trained on. Resume from a checkpoint of an epoch's end, or on the "
                      "process count and batch sizes of the saving run; train from DataLoaders.",
                      stacklevel=user_stacklevel())


def save_weights(trainer: TrainerParts, path: str | os.PathLike) -> str:
    """``Trainer.save_checkpoint(path, weights_only=True)``: the unwrapped module's weights (``save_model``) and its
    ``hparams.json`` (from which ``load_from_checkpoint`` rebuilds it), appearing complete or not at all."""
    from ..callbacks.hparams_file import write_hparams

    module = trainer.module
    trainer.accelerator.save_model_folder(module, path, extra=lambda folder: write_hparams(module, folder,
                                                                                         container_keys(module)))
    return os.fspath(path)


def eval_checkpoint(trainer: TrainerParts, ckpt_path: Any) -> str | None:
    """The checkpoint validate/test/predict load (``resolve_ckpt``'s answer). Without a module and without
    ``ckpt_path``, after a fit whose ModelCheckpoint kept a best checkpoint: that one, with a warning (Lightning's
    rule); a module passed is evaluated as it is."""
    if ckpt_path is None and not trainer.run_setup.module_passed and _has_best(trainer):
        fn = trainer.state.fn or "evaluation"
        # The middle sentence is Lightning's, so that a warnings filter written for Lightning still matches.
        warnings.warn(f"Trainer.{fn}() got no module and no ckpt_path: it evaluates the best checkpoint of the "
                      f"previous fit, {trainer.checkpoint_callback.best_model_path}. The best model of the previous "
                      "`fit` call will be used. Pass ckpt_path='best', 'last' or a folder to choose, or pass the "
                      "module to evaluate its current weights.", UserWarning, stacklevel=4)
        ckpt_path = BEST
    path = trainer.run_setup.ckpt_path = resolve_ckpt(trainer, ckpt_path)
    if path is None and ckpt_path == LAST and trainer.is_global_zero:  # Lightning's rule: the weights as they are
        warn_no_last(trainer, trainer.state.fn or "validate")
    return path


def load_weights(trainer: TrainerParts, path: str, model: Any) -> None:
    """Loads the weights of the checkpoint ``path`` (a folder or a single-file PyTorch checkpoint) into ``model``,
    the prepared model, as strictly as the module's ``strict_loading`` says (by default every key must match)."""
    if os.path.isdir(path) and trainer.accelerator.strategy.load_checkpoint_shards(path, [model], []):
        return  # FSDP checkpoints hold the weights as torch.distributed.checkpoint shards (the strategy reads them)
    from ..accelerator import MismatchedKeysError, load_checkpoint_in_model

    strict = trainer.module.strict_loading if trainer.module is not None else True
    try:
        load_checkpoint_in_model(trainer.accelerator.unwrap_model(model), path, strict=strict)
    except MismatchedKeysError as error:
        raise MismatchedKeysError(f"{error} In a Trainer, module.strict_loading decides: evaluate the module class "
                                  "the checkpoint was written from, or set module.strict_loading = False to load "
                                  "the keys that match.") from error


# -- finding checkpoints ----------------------------------------------------------------------------------------------
def find_last_checkpoint(folders: Iterable[str]) -> str | None:
    """The complete checkpoint saved last among the sub-folders of ``folders`` (see module docstring)."""
    from ..accelerator import checkpoints_in

    best: tuple[float, int, int] | None = None
    found = None
    for folder in dict.fromkeys(os.path.abspath(f) for f in folders):
        for entry, step, saved_at in checkpoints_in(folder):
            # The time recorded in the checkpoint; the folder's own time for one written before it was recorded.
            is_last = int(entry.name in (LAST_FOLDER, LAST))
            key = (entry.stat().st_mtime if saved_at is None else saved_at, is_last, step)
            if best is None or key > best:
                best, found = key, entry.path
    return found
