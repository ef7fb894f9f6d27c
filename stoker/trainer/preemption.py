"""Preemption: SIGTERM / SIGUSR1 / SIGINT during ``fit`` become a checkpoint plus a non-zero exit, agreed on by
every process (``SignalAgreement``, in the engine's ``distributed/agreement.py``)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..accelerator import SignalAgreement, agree_on_max
from ..loggers.layout import default_checkpoint_dir
from .checkpointing import LAST_FOLDER

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from .parts import TrainerParts


def agree_on_signal(accelerator: Accelerator, received: int | None) -> int | None:
    """The preemption signal every process acts on: the highest signal number any process received (None: none).

    One small blocking all-reduce. The Trainer uses :class:`SignalAgreement` instead, which agrees without waiting.
    """
    return agree_on_max(accelerator.strategy, received, accelerator.device, accelerator.num_processes)


class Preemption:
    """Turns SIGTERM/SIGUSR1/SIGINT during ``fit`` into: finish the optimizer step, save, exit non-zero.

    The handler only records the signal; :meth:`check`, called by the loop right after an optimizer step (and
    after each epoch), saves ``{default_root_dir}/checkpoints/last.ckpt`` and raises ``SystemExit(128 + signal)``
    (143 for SIGTERM, 130 for SIGINT, 138 for SIGUSR1). In one process that is the step during which the signal
    arrived. With several processes the processes agree on the signal without blocking each step
    (:class:`SignalAgreement`): every process stops after the same optimizer step, the one after the step during
    which the first signal arrived (or at the epoch's end or the run's last step, if one comes first). A second
    SIGINT (Ctrl-C pressed again) does not wait: it raises ``KeyboardInterrupt`` at once.
    """

    SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGUSR1", "SIGINT")) if s)

    def __init__(self) -> None:
        self.received: int | None = None
        self.saved_to: str | None = None  # the checkpoint written for the signal (the end-of-run report names it)
        self._previous: dict[int, Any] = {}
        self._agreement = SignalAgreement()
        self._several = False  # several processes: signals are agreed on (set by install)
        # Whether check() has work after the next optimizer step: several processes (the agreement runs every
        # step) or a signal received. The loop reads it every step instead of calling check() (the hot path).
        self.due = False

    def install(self, num_processes: int) -> None:
        """Starts watching for signals for a run of ``num_processes`` processes (no default: with more than one,
        a signal must be agreed on by every process before anyone stops, so the count cannot be assumed)."""
        self.received = self.saved_to = None
        self._several = self.due = num_processes > 1
        self._agreement.reset()
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach only the main thread; a Trainer run elsewhere cannot be preempted cleanly
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        self._agreement.reset()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # pressed twice: stop now, without the checkpoint
        self.received = signum if self.received is None else max(self.received, signum)
        self.due = True

    def check(self, trainer: TrainerParts, blocking: bool = False) -> None:
        """After an optimizer step: saves and exits once the processes agreed on a signal. ``blocking`` (epoch
        ends, the run's last step): agree now on the pending and the current signals.

        Collective with several processes: every process calls it at the same optimizer steps and epoch ends.
        """
        if not self._several:
            flag = self.received
        elif blocking:
            flag = self._agreement.flush(trainer.accelerator.device, self.received)
        else:
            flag = self._agreement.step(trainer.accelerator.device, self.received)
        if flag is None:
            return
        self.received = flag
        path = os.path.join(default_checkpoint_dir(trainer.default_root_dir, trainer.loggers), LAST_FOLDER)  # the run's
        self.saved_to = trainer.save_checkpoint(path)
        name = signal.Signals(flag).name if flag in set(signal.Signals) else flag
        if trainer.is_global_zero:
            print(f"stoker: preempted by {name} at step {trainer.global_step} (epoch {trainer.current_epoch}); saved "
                  f"a resumable checkpoint to {path}. Resume with trainer.fit(..., ckpt_path='last').",
                  file=sys.stderr, flush=True)
        raise SystemExit(128 + int(flag))
