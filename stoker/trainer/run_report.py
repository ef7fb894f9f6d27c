"""The end of a run as the user sees it: a closing line and ``run_summary.json`` in the run's folder.

Owns: the wording of the closing line and the summary file. Decides no stop itself, it reads each stop from its
owner: the fit loop's ``stop_reason`` (``max_epochs`` / ``max_steps`` / ``should_stop`` / training turned off), the
``stopping_reason`` of the callback that set ``should_stop`` (``EarlyStopping``, ``Timer``), the signal that
``Preemption`` acted on, and the exception that ended the run. Only the main process prints and writes.

The line goes to stdout, beside the model summary that opened the run (stderr carries the progress bars and the
resume/preemption notices). ``validate`` / ``test`` that did not complete (an error, a signal) print it here too;
one that went well prints it only with ``verbose=True``, after its metrics table (the entry point calls
:meth:`RunReport.say`), and stays quiet with ``verbose=False``; its facts go into the file either way.

The file goes into the run's folder, the first logger's ``log_dir`` (``{save_dir}/{name}/version_N``, beside
``hparams.yaml``; a resumed run continues that version, so its file gains the new call's facts). A run without a
logger (``logger=False``, ``fast_dev_run``) writes no file: it has no folder of its own, and ``default_root_dir``
may be a folder the user lists (the current directory, a checkpoint ``dirpath``).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any

from ..loggers.foreign import first_log_dir, owns_folder

if TYPE_CHECKING:
    from .parts import TrainerParts

SUMMARY_FILE = "run_summary.json"
__all__ = ["SUMMARY_FILE", "RunReport"]


class RunReport:
    """What one ``fit`` / ``validate`` / ``test`` call did, said once at its end.

    The Trainer calls :meth:`begin` when a call starts, :meth:`training_starts` right before the fit loop (after
    a resume), and :meth:`finish` when the call ends, with the exception that ended it (or None). ``last`` holds
    the facts of the last finished call (the dict written under its name in ``run_summary.json``).

    Example:
        >>> trainer.fit(module, loader)              # doctest: +SKIP
        stoker: fit stopped at epoch 2 (global_step=12): max_epochs=3 reached.
          last checkpoint: runs/checkpoints/last | logs: runs/stoker_logs/version_0
        >>> trainer.run_report.last["reason"]         # doctest: +SKIP
        'max_epochs'
    """

    def __init__(self, trainer: TrainerParts) -> None:
        self.trainer = trainer
        self.last: dict[str, Any] | None = None
        self._started = 0.0
        self._before: tuple[int, int, int] = (0, 0, 0)  # (global_step, epoch, batches) when the call started
        self._at_loop: tuple[int, int, int] | None = None  # the same when the fit loop started (after a resume)

    def _position(self) -> tuple[int, int, int]:
        loop = self.trainer.fit_loop
        return self.trainer.global_step, loop.epoch, loop.total_batches

    def begin(self) -> None:
        self._started, self._before, self._at_loop = time.monotonic(), self._position(), None

    def training_starts(self) -> None:
        """Right before the fit loop runs: the position it starts from (a restored checkpoint's, if any)."""
        self._at_loop = self._position()

    def finish(self, fn: str, exception: BaseException | None) -> None:
        """Prints the closing line and writes the summary (main process). Never raises: the run's own exception
        (or result) must reach the caller unchanged."""
        if fn not in ("fit", "validate", "test") or not self.trainer.is_global_zero:
            return
        try:
            facts = self._facts(fn, exception)
            self.last = facts
            if fn == "fit" or facts["status"] != "completed":  # a validate/test that went well: say() if verbose
                print(facts["message"], file=sys.stdout, flush=True)
            if first_log_dir(self.trainer.loggers) is not None:  # its first logger's folder
                self._write(fn, facts)
        except Exception as error:  # a report must not hide the run's outcome
            warnings.warn(f"stoker could not write the end-of-run report: {error!r}", RuntimeWarning, stacklevel=2)

    def say(self, fn: str) -> None:
        """Prints the closing line of the ``fn`` call that just finished (main process): how ``validate`` /
        ``test(verbose=True)`` end, after their metrics. Nothing when that call left no facts (its report failed)."""
        if self.last is not None and self.last["fn"] == fn and self.trainer.is_global_zero:
            print(self.last["message"], file=sys.stdout, flush=True)

    # -- the facts ----------------------------------------------------------------------------------------------
    def _facts(self, fn: str, exception: BaseException | None) -> dict[str, Any]:
        t = self.trainer
        reason, why = self._reason(fn, exception)
        status = "completed" if exception is None else "interrupted" if reason in ("signal", "interrupted") \
            else "failed"
        callback = t.checkpoint_callback
        best = (getattr(callback, "best_model_path", "") or None) if callback is not None else None
        last = (getattr(callback, "last_model_path", "") or None) if callback is not None else None
        if reason == "signal":
            last = t.preemption.saved_to or last
        logs = [os.path.abspath(lg.log_dir) for lg in t.loggers if owns_folder(lg) and lg.log_dir is not None]
        facts: dict[str, Any] = {
            "fn": fn, "status": status, "reason": reason, "why": why, "epoch": t.fit_loop.trained_epoch,
            "global_step": t.global_step, "best_checkpoint": best, "last_checkpoint": last, "log_dirs": logs,
            "seconds": round(time.monotonic() - self._started, 3),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        if best is not None and callback is not None and callback.monitor:
            facts["best_score"] = {"monitor": callback.monitor, "value": callback.best_model_score}
        facts["message"] = _message(facts)
        return facts

    def _reason(self, fn: str, exception: BaseException | None) -> tuple[str, str]:
        """(reason, the sentence saying it): read from the owner of the decision."""
        t = self.trainer
        if exception is not None:
            if isinstance(exception, SystemExit) and t.preemption.received is not None:
                return "signal", f"preempted by {_signal_name(t.preemption.received)}"
            if isinstance(exception, (KeyboardInterrupt, SystemExit)):
                return "interrupted", f"interrupted ({type(exception).__name__})"
            return "error", f"failed with {type(exception).__name__}: {exception}"
        if fn != "fit":
            batches = sum(t.stage_record.loader_batches.get(fn, []))  # the batches that ran (a combined loader's)
            return "completed", "finished" + (f" ({batches:g} batches)" if batches != float("inf") else "")
        reason = t.fit_loop.stop_reason or "completed"
        if reason == "should_stop":
            return self._requested_stop()
        if reason == "limit_train_batches=0":
            return "training_off", "training is turned off (limit_train_batches=0)"
        limit = f"max_epochs={t.max_epochs_effective}" if reason == "max_epochs" else f"max_steps={t.max_steps}"
        if self._at_loop is not None and self._at_loop[2] == t.fit_loop.total_batches and reason != "completed":
            return reason, self._nothing_to_train(reason, limit)
        return reason, f"{limit} reached"

    def _requested_stop(self) -> tuple[str, str]:
        for callback in self.trainer.callbacks:
            # Lightning's stopping_reason_message (EarlyStopping), else a plain stopping_reason string (Timer)
            said = getattr(callback, "stopping_reason_message", None) or getattr(callback, "stopping_reason", "")
            if type(said) is str and said:
                name = type(callback).__name__
                kind = "time_limit" if name == "Timer" else "early_stopping" if name == "EarlyStopping" else "callback"
                return kind, f"{name}: {said.rstrip('.')}"
        return "should_stop", "trainer.should_stop was set"

    def _nothing_to_train(self, reason: str, limit: str) -> str:
        t = self.trainer
        resumed = self._at_loop != self._before
        who = "the checkpoint it resumed from has" if resumed else "this Trainer has"
        done = f"{t.current_epoch} epochs" if reason == "max_epochs" else f"{t.global_step} optimizer steps"
        return f"nothing to train: {who} already done {done} ({limit}); raise {reason} to train on"

    def _write(self, fn: str, facts: dict[str, Any]) -> None:
        t = self.trainer
        folder = os.path.abspath(first_log_dir(t.loggers))
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, SUMMARY_FILE)
        summary: dict[str, Any] = {}
        if os.path.isfile(path):  # each call's facts under its name: a test after a fit keeps the fit's
            try:
                with open(path, encoding="utf-8") as f:
                    summary = json.load(f)
            except (OSError, ValueError):
                summary = {}
        summary[fn] = {k: v for k, v in facts.items() if k != "message"}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
        facts["summary_file"] = path


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _message(facts: dict[str, Any]) -> str:
    if facts["fn"] == "fit":
        head = f"stoker: fit stopped at epoch {facts['epoch']} (global_step={facts['global_step']}): {facts['why']}."
    else:
        head = f"stoker: {facts['fn']} {facts['why']}."
    parts = []
    if facts["best_checkpoint"]:
        score = facts.get("best_score")
        value = f" ({score['monitor']}={score['value']:.6g})" if score and score["value"] is not None else ""
        parts.append(f"best checkpoint: {facts['best_checkpoint']}{value}")
    if facts["last_checkpoint"]:
        parts.append(f"last checkpoint: {facts['last_checkpoint']}")
    if facts["log_dirs"]:
        parts.append(f"logs: {', '.join(facts['log_dirs'])}")
    return head + ("\n  " + " | ".join(parts) if parts else "")
