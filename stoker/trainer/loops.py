"""The fit loop: ``fit``'s epochs and batches (with their resumable position), its training step, its validations.

Owns: the order of work inside an epoch (see ``hooks.py`` for the hook sequence; one batch's step under automatic
optimization is ``auto_step.py``), when epoch schedulers step (at the epoch's last batch, ReduceLROnPlateau after the
epoch's end hooks), when validation runs, when step values go to the loggers, and where a run may stop
(``max_steps``, ``should_stop``, preemption: only after an optimizer step). Does not own: argument
validation or setup (``trainer.py``, ``setup.py``), the evaluation loops (``evaluation.py``), checkpoint contents
(``checkpointing.py``), logged values (``logging.py``).

Position, as saved in checkpoints: ``epoch``, ``batches_done`` in it, and ``phase``: ``"batches"`` while batches
remain, ``"end"`` once they are done (end-of-epoch validation, ``on_train_epoch_end``, epoch schedulers). A resume
continues after the point that saved it: mid-epoch -> the validation due after its batch (``val_pending``), the next
batch; in the epoch's end -> its end hooks unless begun, the epoch schedulers unless stepped, the next epoch.
"""

from __future__ import annotations

import functools
import logging
import math
from time import monotonic  # the clock of a time-based val_check_interval (a test replaces this name)
from collections.abc import Callable, Mapping
import warnings
from typing import TYPE_CHECKING, Any

import torch

from .args import training_off
from .auto_step import AutomaticStep, step_plateau_schedulers
from .batch_iter import check_training, empty_epoch_error, restart_unfinished, train_iterator
from .evaluation import run_evaluation
from .hooks import batch_mover
from .losses import detached
from .manual import manual_training_step
from .run import FitRun
from .stages import VALIDATE
from .step_args import takes_iterator
from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    from .parts import TrainerParts

log = logging.getLogger("stoker.trainer.trainer")  # the Trainer's records, on Lightning's module path (a face)


class FitLoop:
    """Runs ``fit``'s epochs and batches; :meth:`state_dict` is its position (see the module docstring)."""

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        self.min_warned = False  # the stop-waits-for-min_epochs/min_steps warning was given
        self.none_warned = False  # the train loader yielded None in this run() (warned once per run)
        self.epoch = 0
        self.batches_done = 0  # batches of this epoch consumed (== the train loader's position)
        self.epoch_batches_finished = False  # the last consumed batch was the epoch's last
        self.total_batches = 0  # across epochs (check_val_every_n_epoch=None counts these)
        self.phase = "batches"
        self.schedulers_done = False
        self.end_hooks_started = False  # the epoch's end hooks have begun (phase "end": after its validation)
        self.val_pending = False  # a validation is due after the batch whose end hooks run (saved: resumes with it)
        self.plateau_pending = False  # step ReduceLROnPlateau schedulers wait for that validation (auto_step.py; saved)
        self.last_logged_step = -1
        self.log_every = trainer.log_every_n_steps  # the step-logging cadence of the current run()
        self.iter_steps = False  # training_step(self, dataloader_iter) in the current run() (batch_iter.py)
        # Why the last run() ended: "should_stop" | "max_steps" | "max_epochs" (read by run_report.py), or None.
        self.stop_reason: str | None = None
        # The epoch's automatic step (auto_step.py; set per epoch by _epoch_step, None under manual optimization).
        self._auto: AutomaticStep | None = None
        # Published through the Trainer (its window_closed, epoch_finished, validation_count); not saved.
        self.window_closed = False  # the current/last training batch closed an accumulation window
        self.epoch_finished = False  # the epoch being ended reached its last batch (see Trainer.epoch_finished)
        self.rest_skipped = False  # on_train_batch_start returned -1 in this epoch: it ended there, unvalidated
        self.validation_count = 0  # validations completed in this fit (the sanity check excluded)
        self.last_val_time = 0.0  # monotonic() when the last validation ended (or run() began)

    # -- position -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches_done": self.batches_done, "total_batches": self.total_batches,
                "epoch_batches_finished": self.epoch_batches_finished, "phase": self.phase,
                "schedulers_done": self.schedulers_done, "last_logged_step": self.last_logged_step,
                "val_pending": self.val_pending, "end_hooks_started": self.end_hooks_started,
                "plateau_pending": self.plateau_pending}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch, self.batches_done, self.total_batches = (int(state[key]) for key in
                                                             ("epoch", "batches_done", "total_batches"))
        self.epoch_batches_finished = bool(state["epoch_batches_finished"])
        self.phase = str(state["phase"])
        self.schedulers_done = bool(state["schedulers_done"])
        self.last_logged_step = int(state["last_logged_step"])
        self.val_pending = bool(state.get("val_pending", False))  # absent from checkpoints written before it
        self.end_hooks_started = bool(state.get("end_hooks_started", True))  # before it: resumed past the hooks
        self.plateau_pending = bool(state.get("plateau_pending", False))

    @property
    def trained_epoch(self) -> int:
        """The epoch whose training produced the current weights (0 before any training)."""
        at_next_epoch_start = self.phase == "batches" and self.batches_done == 0
        return self.epoch - 1 if self.epoch > 0 and at_next_epoch_start else self.epoch

    # -- epochs ---------------------------------------------------------------------------------------------------
    def stop_requested(self) -> bool:
        """``should_stop``, once ``min_epochs``/``min_steps`` allow it (until then the flag waits, as in Lightning)."""
        t = self.trainer
        if not t.should_stop:
            return False
        options = t.options
        if (options.min_steps is None or t.global_step >= options.min_steps) and \
                (options.min_epochs is None or self.epoch >= options.min_epochs):
            return True
        if not self.min_warned:
            self.min_warned = True
            log.info(f"Trainer was signaled to stop but the required `min_epochs={options.min_epochs!r}` or "
                     f"`min_steps={options.min_steps!r}` has not been met. Training will continue...")
            warnings.warn(f"Trainer was asked to stop at global_step {t.global_step} (epoch {self.epoch}), but "
                          f"min_epochs={options.min_epochs} / min_steps={options.min_steps} are not reached yet; "
                          "training goes on until they are.", stacklevel=user_stacklevel())
        return False

    @property
    def done(self) -> bool:
        """Whether the fit has nothing left to run (Lightning's ``fit_loop.done``, also before a fit); records why in
        ``stop_reason``: should_stop, a limit reached, or ``limit_train_batches=0`` (Lightning's: no training)."""
        t, epochs = self.trainer, self.trainer.max_epochs_effective
        reasons = (("should_stop", self.stop_requested()), ("max_steps", t.limits.steps_reached(t.global_step)),
                   ("max_epochs", epochs is not None and self.epoch >= epochs),
                   ("limit_train_batches=0", training_off(t.limit_train_batches)))
        self.stop_reason = next((name for name, holds in reasons if holds), None)
        return self.stop_reason is not None

    def run(self, run: FitRun) -> None:
        """Runs ``run``'s epochs until a stopping rule holds (see :meth:`done`)."""
        self.last_val_time, self.none_warned = monotonic(), False  # a time-based val_check_interval counts from here
        self.log_every = 1 if self.trainer.dry_run else self.trainer.log_every_n_steps  # fast_dev_run: every step
        self.iter_steps = takes_iterator(self.trainer.module.training_step)
        while not self.done:
            self._run_epoch(run)

    def _run_epoch(self, run: FitRun) -> None:
        t = self.trainer
        if self.phase == "batches":
            if self.batches_done == 0 and t.options.reload_dataloaders_every_n_epochs:
                t.run_setup.reload_loaders(run, self.epoch)
            results = t.train_results
            results.in_batch = self.epoch_finished = self.rest_skipped = False
            t.hooks.call("on_train_epoch_start")
            stopped = self._pending_validation(run) or self.stop_requested()  # also a stop asked by the hooks above
            if not stopped and not self.epoch_batches_finished:
                stopped = self._run_iter_steps(run) if self.iter_steps else self._run_batches(run)
            if self.rest_skipped:  # the module ended the epoch early (-1): the next one reads the loader afresh
                restart_unfinished(run.train_loader)
            # A loader of unknown length cannot tell a stopped epoch from a finished one: counted as finished.
            self.epoch_finished = not stopped or math.isinf(t.num_training_batches)
            if stopped:  # max_steps / should_stop: the run ends here, the position stays mid-epoch
                self._epoch_end_hooks()
                return
            self.phase, self.schedulers_done, self.end_hooks_started = "end", False, False
            if run.val_enabled and self.batches_done and not self.rest_skipped and \
                    self._val_due(run, self.batches_done - 1, at_end=True):
                self.validate(run)
        if not self.end_hooks_started:  # also a resume from a checkpoint that this epoch's validation saved
            self._step_plateau(at_end=True)  # the last batch's, after the epoch's validation
            self.end_hooks_started = True
            self._epoch_end_hooks()
        self.end_epoch(run)
        t.preemption.check(t, blocking=True)  # blocking: also takes the agreement still in flight

    def end_epoch(self, run: FitRun) -> None:
        """The last of an epoch's end: its schedulers (unless stepped), then the position moves to the next epoch.
        Also what a resume from a checkpoint of an epoch's end does first (Lightning's ``current_epoch`` then)."""
        t = self.trainer
        if not self.schedulers_done:
            if run.automatic:  # ReduceLROnPlateau, after the epoch's values (manual optimization steps its own)
                step_plateau_schedulers(t, "epoch", self.epoch + 1)
            self.schedulers_done = True
        self.trainer.train_results.reset_epoch()  # a resume from the end hooks holds the ended epoch's sums
        self.epoch, self.phase, self.batches_done, self.epoch_batches_finished = self.epoch + 1, "batches", 0, False

    def _epoch_end_hooks(self) -> None:
        t = self.trainer
        t.nonfinite.check(t.accelerator)
        results, t.train_results.in_batch = t.train_results, False
        results.publish_epoch()  # epoch values of training_step visible to the hooks below
        first, monitoring = t.hooks.split_monitored()  # the other callbacks and the module, then the monitors
        for hook in first:
            hook()
        if monitoring:
            results.publish_epoch()  # what the module logged there is what checkpointing / early stopping compare
            for hook in monitoring:
                hook()
        values = results.publish_epoch()  # again: now with what the hooks logged
        t.send_to_loggers(values)
        results.reset_epoch()

    # -- batches --------------------------------------------------------------------------------------------------
    def _epoch_step(self, run: FitRun) -> Callable[[Any, int], Any]:
        """The call that runs one batch's step, with the step's hooks looked up once per epoch: the batch loop is
        the hot path (see DESIGN.md, "Hot path budget")."""
        if run.automatic:
            self._auto = AutomaticStep(self.trainer, run, self.epoch)
            return self._auto.step
        self._auto = None  # manual optimization: training_step does backward and steps itself (manual.py)
        return functools.partial(manual_training_step, run, self.trainer.accelerator)

    def _run_batches(self, run: FitRun) -> bool:
        """Runs the epoch's remaining batches; True when the run must stop before the epoch's end."""
        t = self.trainer
        acc, loader, model, results = t.accelerator, run.train_loader, run.model, t.train_results
        step, start_hooks = self._epoch_step(run), t.hooks.get("on_train_batch_start")
        auto = self._auto  # set by _epoch_step
        move = batch_mover(t.module, loader, acc, t.datamodule)  # None: the loader places the batches
        fresh, batch_idx, stopped, asked = self.batches_done == 0, self.batches_done, False, None
        if fresh:
            loader.set_epoch(self.epoch)
        iterator = iter(loader)
        try:
            for batch in iterator:
                self.batches_done = batch_idx + 1
                last = self.epoch_batches_finished = loader.end_of_dataloader
                if batch is None:  # a collate_fn's way to drop a batch: no step, only the end hooks (see _skip)
                    if self._skip(run, batch_idx, last):
                        stopped = not last
                        break
                    batch_idx += 1
                    continue
                if move is not None:
                    batch = move(batch, 0)
                results.batch, results.in_batch, self.window_closed = batch, True, False
                for hook in start_hooks:  # the callbacks', then the module's: its answer is the last
                    asked = hook(batch, batch_idx)
                if asked is not None and asked == -1:  # Lightning's rule: the epoch ends at this batch
                    self.epoch_batches_finished = self.rest_skipped = True
                    if auto is not None:  # which makes it the epoch's last, as in Lightning
                        auto.epoch_schedulers()
                    break
                with acc.accumulate(model):
                    outputs = step(batch, batch_idx)
                    synced = acc.sync_gradients  # decided when the micro-step opened
                    if synced and auto is not None:  # the window is complete: the optimizer step, inside it
                        self.plateau_pending = auto.optimizer_step(batch_idx)
                        if last:
                            auto.epoch_schedulers()
                self.window_closed = synced
                if self._after_batch(run, outputs, batch, batch_idx, synced, last):
                    stopped = not last
                    break
                batch_idx += 1
        finally:
            if self.epoch_batches_finished and not stopped and not self.rest_skipped:
                next(iterator, None)  # the epoch's last batch is done (a stop there too): the loader's epoch ends
            iterator.close()  # leaving early keeps the loader's position: a stopped run resumes mid-epoch
        if fresh and batch_idx == 0 and self.batches_done == 0:
            raise empty_epoch_error(self.epoch)
        return stopped

    def _run_iter_steps(self, run: FitRun) -> bool:
        """:meth:`_run_batches` for a ``training_step(self, dataloader_iter)``: the step pulls the batches
        (``batch_iter.py``), ``batches_done`` counts them; a ``StopIteration`` out of the step ends the epoch."""
        t, acc, loader, model = self.trainer, self.trainer.accelerator, run.train_loader, run.model
        step, start_hooks = self._epoch_step(run), t.hooks.get("on_train_batch_start")
        auto, start = self._auto, self.batches_done
        check_training(t, auto)
        if start == 0:
            loader.set_epoch(self.epoch)
        source = train_iterator(loader, start)
        stopped = ended = False
        try:
            while not source.done:
                t.train_results.batch, t.train_results.in_batch = source, True
                self.window_closed, before = False, source.pulled
                for hook in start_hooks:
                    hook(source.batch, source.batch_idx)
                try:
                    with acc.accumulate(model):
                        outputs = step(source, source.batch_idx)
                        synced, last = acc.sync_gradients, source.done
                        if synced and auto is not None:
                            self.plateau_pending = auto.optimizer_step(source.batch_idx)
                            if last:
                                auto.epoch_schedulers()
                except StopIteration:  # pulled past the end, or the step's own way to end the epoch
                    ended = True
                    break
                finally:
                    self.batches_done = start + source.pulled
                self.epoch_batches_finished, self.window_closed = last, synced
                if self._after_batch(run, outputs, source.batch, source.batch_idx, synced, last,
                                     source.pulled - before):
                    stopped = not last
                    break
        finally:
            source.close()
            if ended:
                self.epoch_batches_finished = True
                restart_unfinished(loader)  # the rest of this epoch is dropped: the next one starts afresh
        if ended and start == 0 and source.pulled == 0 and source.done:
            raise empty_epoch_error(self.epoch)
        return stopped

    def _skip(self, run: FitRun, batch_idx: int, last: bool) -> bool:
        """A batch the train loader gave as ``None`` (Lightning's rule: a ``collate_fn`` may drop a bad batch so):
        no ``on_train_batch_start``, no step, no optimizer step; ``on_train_batch_end`` gets ``outputs=None`` and a
        validation may follow as after any batch. Warned once per run. True when the run stops here."""
        if not self.none_warned:
            self.none_warned = True
            warnings.warn(f"The train_dataloader yielded None as batch {batch_idx} of epoch {self.epoch}: that "
                          "batch is skipped (no training_step and no optimizer step; on_train_batch_end gets "
                          "outputs=None). Ignore this if your collate_fn drops batches on purpose.",
                          stacklevel=user_stacklevel())
        self.window_closed = False
        return self._after_batch(run, None, None, batch_idx, False, last)

    def _after_batch(self, run: FitRun, outputs: Any, batch: Any, batch_idx: int, synced: bool, last: bool,
                     pulled: int = 1) -> bool:
        """After a batch's step (``pulled``: the batches it took): its end hooks, logging, validation when due; True
        when the run stops here."""
        t = self.trainer
        self.total_batches += pulled  # before the end hooks: a checkpoint they save counts this batch as done
        self.val_pending = due = run.val_enabled and not last and self._val_due(run, batch_idx, pulled=pulled)
        end_hooks = t.hooks.get("on_train_batch_end")
        if end_hooks:
            # Lightning's form: a returned loss tensor reaches the hooks as {"loss": loss}, so a callback's
            # outputs["loss"] works either way; a dict's tensors detached (as Lightning's: float(outputs["loss"])
            # must not warn about a graph); None as it is. detach() makes no copy and no device work.
            outputs = {"loss": outputs.detach()} if type(outputs) is torch.Tensor else detached(outputs)
            for hook in end_hooks:
                hook(outputs, batch, batch_idx)
        t.train_results.in_batch = False
        applied = t.accelerator.step
        # _log_step's cadence test, inlined: the call is taken once per log_every_n_steps steps
        if synced and not applied % self.log_every and applied != self.last_logged_step:
            self._log_step(applied, bool(t.loggers) or t.dry_run)
        if due:
            self.val_pending = False
            self.validate(run)
        self._step_plateau()
        # _stop_now only when a stop may be due: a request, max_steps reached, a preemption check to run
        return synced and (t.should_stop or t.preemption.due or t.limits.steps_reached(applied)) \
            and self._stop_now(applied)

    def _pending_validation(self, run: FitRun) -> bool:
        """After a resume from a batch's end hooks: the validation due there, the batch's waiting ReduceLROnPlateau
        schedulers (unless they wait for the epoch's validation), then the stop; True when the run stops."""
        t, pending, self.val_pending = self.trainer, self.val_pending and run.val_enabled, False
        if pending:
            self.validate(run)
        self._step_plateau()
        return pending and t.accelerator.sync_gradients and t.should_stop and self._stop_now(t.accelerator.step)

    def _step_plateau(self, at_end: bool = False) -> None:
        """Step ReduceLROnPlateau schedulers waiting for the batch's validation (the last batch's: the epoch's)."""
        if self.plateau_pending and (at_end or not self.epoch_batches_finished):
            self.plateau_pending = False
            step_plateau_schedulers(self.trainer, "step", self.trainer.accelerator.step)

    def _stop_now(self, applied: int) -> bool:
        """After an optimizer step (``applied``: the steps applied so far): whether the run stops here."""
        t, stop = self.trainer, self.stop_requested() or self.trainer.limits.steps_reached(applied)
        # Saves a checkpoint and exits when a SIGTERM/SIGUSR1 arrived (several processes: agreed one step late,
        # without waiting; on the run's last step at once, so that no signal is left unread).
        t.preemption.check(t, blocking=stop)
        return stop

    def _log_step(self, step: int, has_loggers: bool) -> None:
        """After an optimizer step (``step``: the steps applied so far), every ``log_every_n_steps`` of them (the
        batch loop tests the cadence before calling): the non-finite check and the step values to the loggers."""
        t, self.last_logged_step = self.trainer, step
        t.nonfinite.check(t.accelerator)  # values are read now anyway: the losses held since the last check too
        values = t.train_results.pop_step_values() if has_loggers else None
        if values:
            t.send_to_loggers(values)

    # -- validation -----------------------------------------------------------------------------------------------
    def validate(self, run: FitRun) -> None:
        """One validation inside the fit (counted in ``validation_count``)."""
        state = self.trainer.state
        previous, state.stage = state.stage, VALIDATE.name
        try:
            loaders = self.trainer.run_setup.val_loaders(run)  # asked for at the first validation (and on reload)
            if loaders:
                run_evaluation(self.trainer, VALIDATE.name, loaders, counter=self)
        finally:
            state.stage = previous
            self.last_val_time = monotonic()

    def _val_due(self, run: FitRun, batch_idx: int, at_end: bool = False, pulled: int = 1) -> bool:
        """Whether a validation is due after the batch ``batch_idx`` (the last of ``pulled`` a step took: due when
        one of them reached the interval)."""
        t, every_n = self.trainer, self.trainer.check_val_every_n_epoch
        if every_n is not None and (self.epoch + 1) % every_n:
            return False
        if t.val_check_seconds is not None:  # due once that long has passed since the last validation (or start)
            return monotonic() - self.last_val_time >= t.val_check_seconds
        interval = run.val_check_batch
        if interval is None:  # a fraction of 1.0 of a loader of unknown length: the epoch's end
            return at_end
        count = self.total_batches if every_n is None else batch_idx + 1  # batches done, this one included
        return count // interval > (count - pulled) // interval
