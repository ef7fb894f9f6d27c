"""`ModelCheckpoint`: full resumable checkpoints on a schedule, the best ``k`` kept, ``last`` (when asked) fresh.

Owns *when* to save (epoch, step and time triggers, a trigger deferred to the next validation) and the score a save
is ranked by. Elsewhere: names and folders (checkpoint_files.py), constructor checks (checkpoint_options.py), what is
kept (checkpoint_ranking.py), the record of the kept checkpoints and its state across a resume (checkpoint_record.py),
the safe write order (checkpoint_writer.py). ``last`` is refreshed at *every* save, improved or not (Lightning 2.6
stops refreshing it then, so ``ckpt_path="last"`` resumes an old epoch).
"""

# No `from __future__ import annotations`: a CLI (jsonargparse) reads the constructor's annotations at run time.
import os
import time
import warnings
from datetime import timedelta
from typing import Any, Literal

from stoker.callbacks._fit_progress import (agreed_any, agreed_mean, fit_validates, monitored_value,
                                            no_metric_message)
from stoker.callbacks.base import TrainerView
from stoker.callbacks.checkpoint_files import (EXTENSION, LAST_NAME, WEIGHTS_DIR, check_dirpath,
                                               format_checkpoint_name, unique_path, warn_if_earlier_run)
from stoker.callbacks.checkpoint_options import EVERY_EPOCH as _EVERY_EPOCH, check_options
from stoker.callbacks.checkpoint_ranking import admit, ordering
from stoker.callbacks.checkpoint_record import CheckpointRecord
from stoker.callbacks.checkpoint_writer import CheckpointWriter, finish_evictions
from stoker.callbacks.timer import SYNC_EVERY_N_STEPS
from stoker.loggers.layout import default_checkpoint_dir
from stoker.user_frame import user_stacklevel

__all__ = ["ModelCheckpoint", "format_checkpoint_name"]


class ModelCheckpoint(CheckpointRecord):
    """Saves full resumable checkpoints, keeps the best ``save_top_k`` and (``save_last=True``) a ``last`` that is
    always newest.

    A save happens every ``every_n_epochs`` epochs (after their validation) or every ``every_n_train_steps``
    optimizer steps; a step trigger alone turns the epoch trigger off (as Lightning; unlike Lightning, asking for
    both gives both). An epoch stopped early (``max_steps``, ``should_stop``) is saved like a finished one, and a
    fit that ends unsaved writes ``last`` (with ``save_last``). A monitored value is ranked once: a later save that
    sees the same value refreshes only ``last``, and a step or time trigger that finds it missing or already ranked
    ranks at the next validation's end instead (as Lightning). Each save is a complete ``save_state`` folder named
    ``{filename}.ckpt``. With ``monitor`` the ``save_top_k`` best scores are kept (NaN is the worst); without it the
    newest (``save_top_k`` 1) or all (-1). ``save_top_k=0`` keeps none (only ``last``). The checkpoint a fit
    resumed from is never deleted by the top k (it leaves ``best_k_models``, not the disk).

    Args:
        dirpath: Folder for the checkpoints; default: the first logger's ``version_{n}/checkpoints`` (as
            Lightning's), or ``{default_root_dir}/checkpoints`` without a logger (``stoker.loggers.layout``).
        filename: Name template, e.g. ``"{epoch}-{step}-{val/loss:.3f}"`` (default ``"{epoch}-{step}"``): ``epoch``,
            ``step`` and any logged metric, as ``name=value``; characters unsafe in folder names become ``_``.
        monitor: Metric that ranks checkpoints, e.g. ``"val/loss"``; ``None`` keeps the newest.
        mode: ``"min"`` or ``"max"``: which scores are better. save_top_k: How many to keep (-1 all, 0 none).
        save_last: True (or ``"link"``): keep ``{dirpath}/last.ckpt`` refreshed at every save (a hard-linked copy of
            a new top-k folder). None/False (default, as Lightning): no ``last``.
        save_on_exception: When ``fit`` raises after training started, save the state at that moment under the
            ``filename`` template (not ranked; one process only, as `OnExceptionCheckpoint`).
        enable_version_counter: A name already taken in ``dirpath`` gets ``-v1``, ``-v2``... (default); False
            replaces the folder of that name instead.
        every_n_train_steps: Save every n optimizer steps (``None`` or 0: never by steps).
        every_n_epochs: Save every n epochs (``None`` or 0: never at epoch ends). Default: 1, or 0 with a step trigger.
        export_weights: Also write ``save_model`` safetensors of the unwrapped model to ``{dirpath}/weights/{name}``.
        save_on_train_epoch_end: True: the epoch trigger saves at the epoch's end; False: after each validation
            in the epochs it selects. None: False when validation runs several times per epoch (as Lightning), else
            True (Lightning also picks False with ``check_val_every_n_epoch`` > 1).
        auto_insert_metric_name: Write ``{name}`` fields as ``name=value`` (default) or as the bare value, for
            templates such as ``"epoch{epoch:02d}-loss{val/loss:.2f}"``.
        save_weights_only: Each folder holds only ``model.safetensors`` (for ``load_checkpoint_in_model`` and
            ``validate/test/predict(ckpt_path=...)``), not resumable; ``export_weights``/``async_save`` do nothing.
        train_time_interval: Save when this much wall-clock time has passed since the previous time-triggered save
            (checked after each optimizer step; every 10 with several processes; ``timedelta(0)``: at every check);
            turns the epoch trigger off.
        verbose: Print a line for each checkpoint written (main process).
        async_save: Write each checkpoint in the background from a CPU copy of the state (without it the files are
            written first and only the commit is in the background). The next save and the end of ``fit`` wait for
            it. Synchronous with several processes, FSDP or ``export_weights``.

    Attributes:
        best_model_path: Absolute path of the best kept checkpoint (``""`` before the first).
        best_model_score: Its monitored value as a float (``None`` before the first, or without ``monitor``).
        last_model_path: Absolute path of ``last`` once written (``""`` before).
        best_k_models: Absolute path -> score of every kept ranked checkpoint (``{}`` without ``monitor``).
        current_score: The score of the latest ranked save (``None`` before it).
        kth_best_model_path, kth_value: The kept checkpoint the next better one displaces, and its score. These
            record attributes may be assigned (as in Lightning); an assigned value stands until the next ranked save.
        resumed_from: The checkpoint folder this fit resumed from (``""`` for a fresh fit): never deleted by top-k.
        CHECKPOINT_NAME_LAST, FILE_EXTENSION: ``last``'s name template and every name's end (``".ckpt"``).
        STARTING_VERSION: The first version suffix of a name already taken (1: ``-v1``), as in Lightning.

    Example:
        >>> from stoker import Trainer
        >>> ckpt = ModelCheckpoint(monitor="val/loss", save_top_k=2, filename="{epoch}-{val/loss:.3f}")
        >>> Trainer(max_epochs=10, callbacks=[ckpt]).fit(module, train_loader, val_loader)  # doctest: +SKIP
        >>> ckpt.best_model_path                                  # doctest: +SKIP
        '/runs/checkpoints/epoch=7-val_loss=0.112.ckpt'
        >>> Trainer(max_epochs=20).fit(module, train_loader, val_loader, ckpt_path="last")  # doctest: +SKIP
    """

    CHECKPOINT_NAME_LAST = LAST_NAME
    FILE_EXTENSION = EXTENSION
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        monitor: str | None = None, mode: str = "min",
        save_top_k: int = 1,
        save_last: bool | Literal["link"] | None = None,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = _EVERY_EPOCH,
        export_weights: bool = False,
        async_save: bool = False,
        save_on_train_epoch_end: bool | None = None,
        auto_insert_metric_name: bool = True,
        save_weights_only: bool = False,
        train_time_interval: timedelta | None = None,
        verbose: bool = False,
        save_on_exception: bool = False,
        enable_version_counter: bool = True,
    ) -> None:
        super().__init__()  # the record: kept set, paths, scores (checkpoint_record.py)
        self.auto_insert_metric_name = bool(auto_insert_metric_name)
        self.filename = filename or "{epoch}-{step}"
        check_options(mode=mode, save_top_k=save_top_k, every_n_train_steps=every_n_train_steps, save_last=save_last,
                      every_n_epochs=every_n_epochs, monitor=monitor, save_on_train_epoch_end=save_on_train_epoch_end,
                      train_time_interval=train_time_interval, filename=filename, template=self.filename,
                      auto_insert_metric_name=self.auto_insert_metric_name)
        self._dirpath_arg = None if dirpath is None else os.fspath(dirpath)
        self.dirpath: str | None = None if dirpath is None else os.path.abspath(os.path.expanduser(dirpath))
        if self.dirpath is not None:
            check_dirpath(self.dirpath, "ModelCheckpoint(dirpath=...)")
        self.monitor, self.mode, self.save_top_k, self.save_last = monitor, mode, save_top_k, save_last
        self.save_on_exception, self.enable_version_counter = bool(save_on_exception), bool(enable_version_counter)
        self.every_n_train_steps = every_n_train_steps or 0
        if every_n_epochs is _EVERY_EPOCH:  # not given: the epoch trigger is the default only without another
            every_n_epochs = 0 if self.every_n_train_steps or train_time_interval is not None else 1
        self.every_n_epochs = every_n_epochs or 0
        self.export_weights = export_weights and not save_weights_only  # weights-only folders are the export
        self.async_save, self.save_weights_only, self.verbose = bool(async_save), bool(save_weights_only), bool(verbose)
        self.save_on_train_epoch_end, self.train_time_interval = save_on_train_epoch_end, train_time_interval
        self._last_time_save, self._warned_missing, self._fresh = 0.0, False, True
        self._changed_since_save = False  # validation ran since the last save (same step, newer state)
        self._last_ranked: Any = None  # the monitored value object last ranked (a reference, no copy)
        self._ranked_in: dict[str, Any] | None = None  # the trainer's callback_metrics it was ranked from
        self._deferred = False  # a step/time save waits for the next validation's value of `monitor`
        self._resumed = (False, False)  # (deferred, ranked_current) of a restored state, applied at fit start

    @property
    def state_key(self) -> str:
        interval = None if self.train_time_interval is None else str(self.train_time_interval)
        return self._generate_state_key(monitor=self.monitor, mode=self.mode,
                                        every_n_train_steps=self.every_n_train_steps,
                                        every_n_epochs=self.every_n_epochs, train_time_interval=interval)

    # -- schedule -----------------------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, module: Any = None, stage: str = "fit", *, pl_module: Any = None) -> None:
        # `pl_module`: Lightning's name for `module`, for scripts that call setup() by keyword.
        if self._dirpath_arg is not None and "://" in self._dirpath_arg:
            raise ValueError(f"ModelCheckpoint(dirpath={self._dirpath_arg!r}, save_last={self.save_last!r}) is only "
                             "supported for local file paths: checkpoints are folders written on a local or mounted "
                             "file system. Pass a local folder (mount remote storage first).")
        if self.dirpath is None:  # the run's folder: the first logger's version folder (stoker.loggers.layout)
            self.dirpath = default_checkpoint_dir(trainer.default_root_dir, trainer.loggers)
            check_dirpath(self.dirpath, "ModelCheckpoint's default dirpath (the run's checkpoints folder)")
        if stage == "fit":
            self._resumed = (False, False)  # a fresh fit; a resumed one restores its state after setup
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            self._apply_state(state)
        self._watch_resume(trainer, stage)

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        self._last_time_save = time.monotonic()
        # An earlier fit's deferral is not this one's; a resumed fit's comes with its state (setup resets it).
        (self._deferred, ranked), self._resumed = self._resumed, (False, False)
        if ranked and self.monitor is not None:  # its restored value was ranked before the checkpoint: not new
            self._last_ranked, self._ranked_in = trainer.callback_metrics.get(self.monitor), trainer.callback_metrics
        if not trainer.dry_run:  # a debugging run writes nothing, not even the folder's lock
            trainer.accelerator.hold_checkpoint_folder(self.dirpath)  # FolderInUseError while another run writes it
            finish_evictions(trainer, self.dirpath, self.state_key, [*self._kept, self.last_model_path])
            self._fresh = trainer.global_step == 0  # a resumed run has steps, and continues the folder's `last`
            if self._fresh and trainer.is_global_zero:
                warn_if_earlier_run(self.dirpath)

    def on_validation_end(self, trainer: TrainerView, module: Any) -> None:
        # Not trainer.validate(), and not the sanity check (num_sanity_val_steps): it trains nothing, so there is
        # nothing new to save, and its metrics are dropped before training starts.
        if trainer.fitting and not trainer.sanity_checking:
            self._changed_since_save = True
            if self._deferred or (not self._at_epoch_end(trainer) and self._epoch_due(trainer)):
                self._deferred = False
                self._save(trainer)

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # The step triggers count applied optimizer steps: batches that closed a window (trainer.window_closed) and
        # moved global_step. A window whose step was skipped (fp16 overflow, a non-finite loss) leaves global_step
        # at a step that is not due, or that its own batch already saved.
        step = trainer.global_step
        if not trainer.window_closed:
            return
        if self.every_n_train_steps and step and step % self.every_n_train_steps == 0:
            if step != self._last_save_step:
                self._save(trainer, defer=True)
                self._last_time_save = time.monotonic()
        elif self.train_time_interval is not None and (trainer.accelerator.num_processes == 1
                                                       or step % SYNC_EVERY_N_STEPS == 0):  # a collective there
            now = time.monotonic()
            if agreed_any(trainer, now - self._last_time_save >= self.train_time_interval.total_seconds()):
                self._last_time_save = now
                self._save(trainer, defer=True)

    def _at_epoch_end(self, trainer: TrainerView) -> bool:
        # None (Lightning's rule for several validations per epoch): after each of them, so none is lost.
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        return trainer.val_check_interval == 1.0 or not fit_validates(trainer)

    def _epoch_due(self, trainer: TrainerView) -> bool:
        return bool(self.every_n_epochs) and (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._at_epoch_end(trainer) and self._epoch_due(trainer):
            # Also an epoch stopped early (should_stop, max_steps), ranked as Lightning does; a monitored value its
            # cut-off validation never refreshed is stale and not ranked (_score), so that save keeps only `last`.
            self._save(trainer)
        elif not trainer.epoch_finished and self.save_last:
            self._save(trainer, rank=False)  # stopped where no save is due: `last` holds the newest state

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        if trainer.dry_run:
            return
        if self.save_last and self._last_save_step != trainer.global_step:
            self.save_last_now(trainer)

    def save_last_now(self, trainer: TrainerView) -> str:
        """Writes ``{dirpath}/last.ckpt`` now (even with ``save_last=False``), complete when this returns (for
        `Timer` and anyone who must stop with a resumable checkpoint); returns its path."""
        self._require_dirpath()
        self.last_model_path = self._last_path(trainer)
        self._write(trainer, None, [], wait=True, last=True)
        return self.last_model_path

    def _last_path(self, trainer: TrainerView) -> str:
        metrics = _name_fields(trainer)
        name = format_checkpoint_name(self.CHECKPOINT_NAME_LAST, metrics, self.auto_insert_metric_name)
        # A fresh run keeps an earlier run's `last` in dirpath (its own is `last-v1`, as Lightning); a resumed one
        # goes on with its own, or with the folder's `last` when its state did not say which.
        return unique_path(self.dirpath, name, [self.last_model_path], self.FILE_EXTENSION, (WEIGHTS_DIR,),
                           self.enable_version_counter and (self._fresh or bool(self.last_model_path)),
                           self.STARTING_VERSION)

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        """``save_on_exception``: the state at the moment ``fit`` raised, under the ``filename`` template."""
        if (not self.save_on_exception or not trainer.fitting or trainer.sanity_checking or self.dirpath is None
                or trainer.dry_run or self._last_save_step == trainer.global_step
                or isinstance(exception, SystemExit) or trainer.accelerator.num_processes > 1):
            return  # nothing new to save; a preemption saved already; a collective save could hang other processes
        metrics = _name_fields(trainer)
        path = self._new_path(metrics, [])
        try:
            self._write(trainer, path, [], wait=True)
        except Exception as error:  # the user must see the original exception, not this one
            warnings.warn(f"ModelCheckpoint(save_on_exception=True) could not save to {path} after "
                          f"{type(exception).__name__}: {type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)

    # -- state --------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # Also what the next trigger decides by: a ranking deferred to the next validation, and whether the value of
        # `monitor` that the checkpoint's callback_metrics hold was ranked already (it comes back as a new object).
        metrics, value, monitor = self._ranked_in, self._last_ranked, self.monitor
        ranked = metrics is not None and value is not None and monitor is not None and metrics.get(monitor) is value
        return {**super().state_dict(), "deferred": self._deferred, "ranked_current": ranked}

    def _apply_state(self, state: dict[str, Any]) -> None:
        super()._apply_state(state)
        self._resumed = (bool(state.get("deferred", False)), bool(state.get("ranked_current", False)))

    # -- saving -------------------------------------------------------------------------------------------------
    def _save(self, trainer: TrainerView, rank: bool = True, defer: bool = False) -> None:
        """Ranks and writes a checkpoint (and/or ``last``). ``defer``: a step or time trigger whose monitored value
        is missing or already ranked waits for the next validation's end to rank (``last`` is refreshed now)."""
        if trainer.dry_run:  # a debugging run writes nothing (Lightning's rule)
            return
        self._require_dirpath()
        # Names and the top k are decided against finished folders: a save still committing in the background is
        # waited for here (the save itself would wait for it anyway; without one this returns at once).
        trainer.accelerator.wait_for_checkpoints(deletions=False)
        step = int(trainer.global_step)
        metrics = _name_fields(trainer)
        topk_path, evicted = None, []
        if rank and self.save_top_k != 0 and step != self._last_topk_step:
            score = self._score(trainer, metrics, step)
            if score is not None:
                topk_path, evicted = self._admit(metrics, score)
                if topk_path is not None:
                    self._last_topk_step = step
            elif defer and fit_validates(trainer):
                self._deferred = True
        unchanged = step == self._last_save_step and not self._changed_since_save
        if topk_path is None and (not self.save_last or unchanged):
            return  # nothing to keep, or `last` already holds exactly this state
        if self.save_last:
            self.last_model_path = self._last_path(trainer)
        self._write(trainer, topk_path, evicted)
        if self.verbose and trainer.is_global_zero:
            print(f"ModelCheckpoint: saved {topk_path or self.last_model_path} (epoch {trainer.current_epoch}, "
                  f"step {step}){' and last' if topk_path and self.save_last else ''}.", flush=True)

    def _score(self, trainer: TrainerView, metrics: dict[str, Any], step: int) -> float | None:
        if self.monitor is None:
            return float(step)
        if self.monitor not in metrics:
            message = no_metric_message(f"ModelCheckpoint(monitor={self.monitor!r})", self.monitor,
                                        trainer.callback_metrics, ", or set monitor to one of them (None ranks "
                                        "checkpoints by recency).")
            if trainer.validation_count or not fit_validates(trainer):
                raise RuntimeError(message)
            if not self._warned_missing:  # before the first validation a val metric cannot exist yet
                self._warned_missing = True
                warnings.warn(message + " Saving only `last` until it appears.", RuntimeWarning,
                              stacklevel=user_stacklevel())
            return None
        value = metrics[self.monitor]
        if value is self._last_ranked:
            # The very object ranked before: nothing logged a new value since (check_val_every_n_epoch=2), and a
            # stale score must not keep a checkpoint. (validation_count would miss a monitored training metric.)
            return None
        self._last_ranked, self._ranked_in = value, trainer.callback_metrics
        # Every process must make the same keep/delete decision, even for a metric logged without sync_dist.
        score = agreed_mean(trainer, monitored_value(value, f"ModelCheckpoint(monitor={self.monitor!r})"))
        self.current_score = ordering(score, self._minimize)  # NaN: the worst score (Lightning's +-inf)
        return self.current_score

    def _admit(self, metrics: dict[str, Any], score: float) -> tuple[str | None, list[str]]:
        """Decides whether ``score`` enters the top k; returns (new path or None, paths to delete after saving).
        The checkpoint this fit resumed from leaves the top k but stays on disk, under its name."""
        path, evicted = admit(self._kept, self.save_top_k, score, self._minimize,
                              lambda replaceable: self._new_path(metrics, self._deletable(replaceable)))
        if path is not None:
            self._ranked()
        return path, self._deletable(evicted)

    def _new_path(self, metrics: dict[str, Any], replaceable: list[str]) -> str:
        name = format_checkpoint_name(self.filename, metrics, self.auto_insert_metric_name)
        reserved = (os.path.basename(self.last_model_path), self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION,
                    WEIGHTS_DIR)
        return unique_path(self.dirpath, name, replaceable, self.FILE_EXTENSION, reserved, self.enable_version_counter,
                           self.STARTING_VERSION)

    def _write(self, trainer: TrainerView, topk_path: str | None, evicted: list[str], wait: bool = False,
               last: bool = False) -> None:
        # Set before saving, so that the checkpoint's own copy of this state knows it is saved.
        self._last_save_step, self._changed_since_save = int(trainer.global_step), False
        # A logger that uploads checkpoints (log_model) reads them when told: this save is then complete on return.
        wait = wait or any(getattr(logger, "uploads_checkpoints", False) is True for logger in trainer.loggers)
        CheckpointWriter(self.dirpath, bool(self.save_last) or last, self.export_weights, self.save_weights_only,
                         self.async_save, os.path.basename(self.last_model_path) or LAST_NAME + EXTENSION,
                         self.state_key).write(trainer, topk_path, evicted, wait)
        if trainer.is_global_zero:  # Lightning's logger hook (to record or upload the new checkpoint), main process
            for logger in trainer.loggers:
                logger.after_save_checkpoint(self)

    def __repr__(self) -> str:
        return (f"ModelCheckpoint(dirpath={self._dirpath_arg!r}, filename={self.filename!r}, monitor={self.monitor!r}, "
                f"mode={self.mode!r}, save_top_k={self.save_top_k}, save_last={self.save_last!r})")


def _name_fields(trainer: TrainerView) -> dict[str, Any]:
    """What a name template can use: ``epoch``, ``step`` and every metric in ``callback_metrics``."""
    return {"epoch": int(trainer.current_epoch), "step": int(trainer.global_step), **dict(trainer.callback_metrics)}
