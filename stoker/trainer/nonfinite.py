"""What happens when ``training_step`` returns a NaN or infinite loss: ``Trainer(on_nonfinite_loss=...)``.

Owns: the three policies and when each one looks at the loss. Does not own the optimizer step (``loops.py`` asks
:meth:`NonFiniteLoss.skip_step` before it) or the checkpoints (``Trainer.save_checkpoint`` calls :meth:`check`).

- ``"raise"`` (default): the run stops with a ``ValueError`` naming the global step, epoch and ``batch_idx`` of the
  first non-finite loss.
- ``"warn"``: a warning naming the same, and training goes on (the optimizer steps on those gradients, as a plain
  PyTorch loop would).
- ``"skip"``: an optimizer step whose accumulation window saw a non-finite loss never reaches the optimizer: no
  ``optimizer.step``, no scheduler step, ``global_step`` does not advance, the gradients are dropped; a warning
  names the step.

Cost. Reading a loss on the host waits for the device to finish the step, which on a GPU stops the host from
queueing the next step's work. So ``"raise"`` and ``"warn"`` keep a reference to each micro-batch's loss (no device
work, no copy) and look at them together, with one device->host read, only when the Trainer reads values anyway:
when step values go to the loggers (every ``log_every_n_steps`` optimizer steps, loggers or not), at each epoch's
end, before every checkpoint, and at the latest after 1024 micro-batches. The price: the error comes at the next
such point, not at the bad step itself, and the optimizer has stepped on those gradients in between (an fp16
GradScaler skips them), so the weights in memory may be NaN; no checkpoint is written after a non-finite loss.
``"skip"`` must decide before each optimizer step, so it reads the window's losses once per optimizer step: one
device->host read per step (like fp16's GradScaler), plus one small all-reduce with several processes.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import torch
from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    from ..accelerator import Accelerator

MODES = ("raise", "skip", "warn")
# Losses held before they are looked at regardless of the logging cadence: bounds memory (a 0-d device tensor
# each) for runs that log rarely, at the cost of one device->host read per this many micro-batches.
_MAX_PENDING = 1024
# "skip": a loss that stays non-finite would skip every step and never reach max_steps; this many skips in a row end
# the run with an error (a transient NaN skips a few steps at most). RunOptions(nonfinite_skip_limit=...) sets it.
MAX_SKIPS_IN_A_ROW = 100


def check_mode(value: Any) -> str:
    """Validates ``Trainer(on_nonfinite_loss=...)``."""
    if value not in MODES:
        raise ValueError(f"Trainer(on_nonfinite_loss={value!r}) is not a policy. Expected one of: "
                         + ", ".join(repr(m) for m in MODES) + " ('raise' stops the run, 'skip' drops the "
                         "optimizer step, 'warn' warns and trains on).")
    return value


class NonFiniteLoss:
    """Watches the training losses of one ``fit`` (see the module docstring).

    Example:
        >>> guard = NonFiniteLoss("raise")
        >>> guard.watch(loss, step=3, epoch=0, batch_idx=7)   # every micro-batch: keeps a reference
        >>> guard.check(accelerator)                         # at log time: raises if any was NaN/inf
    """

    def __init__(self, mode: str, max_skips_in_a_row: int = MAX_SKIPS_IN_A_ROW) -> None:
        self.mode = check_mode(mode)
        if isinstance(max_skips_in_a_row, bool) or not isinstance(max_skips_in_a_row, int):
            raise TypeError(f"max_skips_in_a_row={max_skips_in_a_row!r} must be an int (optimizer steps).")
        if max_skips_in_a_row < 1:
            raise ValueError(f"max_skips_in_a_row={max_skips_in_a_row} must be at least 1.")
        self.max_skips_in_a_row = max_skips_in_a_row
        self._pending: list[tuple[torch.Tensor, int, int, int]] = []
        self._in_a_row = 0  # "skip": optimizer steps skipped since the last applied one
        self._unreported: list[tuple[int, int, int]] = []  # "skip": where each skip since the last report was
        self.skipped = 0  # "skip": optimizer steps skipped in this fit

    def reset(self) -> None:
        self._pending, self._in_a_row, self._unreported, self.skipped = [], 0, [], 0

    def watch(self, loss: torch.Tensor, step: int, epoch: int, batch_idx: int) -> bool:
        """Records a micro-batch's loss; True when enough are held that :meth:`check` should run now."""
        pending = self._pending
        pending.append((loss.detach(), step, epoch, batch_idx))
        # "skip" looks at every window before its optimizer step: the window bounds what it holds.
        return len(pending) >= _MAX_PENDING and self.mode != "skip"

    def skip_step(self, accelerator: Accelerator) -> bool:
        """``"skip"`` only: True when the window that just closed had a non-finite loss (counted; reported by
        :meth:`check`). Raises once ``max_skips_in_a_row`` steps in a row were skipped: the run makes no progress."""
        first = self._first_bad(accelerator)
        if first is None:
            self._in_a_row = 0
            return False
        self._in_a_row += 1
        self.skipped += 1
        self._unreported.append(first)
        if self._in_a_row >= self.max_skips_in_a_row:
            raise ValueError(
                f"Trainer(on_nonfinite_loss='skip') skipped {self._in_a_row} optimizer steps in a row: the loss "
                f"stays NaN or inf (last: {_where(first)}), so training makes no progress and would not end. Fix "
                "the cause (learning rate, clipping, a numerically safe loss, the input data), or allow longer "
                "streaks with Trainer(options=RunOptions(nonfinite_skip_limit=...)).")
        return True

    def _report(self, accelerator: Accelerator) -> None:
        """``"skip"``: one warning for the steps skipped since the last report (log intervals, epoch ends)."""
        skips, self._unreported = self._unreported, []
        if not skips or not accelerator.is_main_process:  # every process skipped the same steps; one says so
            return
        more = f", and {len(skips) - 1} more since (the last at global_step {skips[-1][0]})" if len(skips) > 1 else ""
        warnings.warn(f"Trainer(on_nonfinite_loss='skip'): {_where(skips[0])} was not finite (NaN or inf); that "
                      f"optimizer step was skipped{more} (no optimizer or scheduler step, gradients dropped). "
                      f"{self.skipped} skipped in this fit so far.", RuntimeWarning, stacklevel=user_stacklevel())

    def check(self, accelerator: Accelerator) -> None:
        """Raises or warns when a loss held since the last check was not finite (one device->host read).

        Collective with several processes: call it at the same point on every process.
        """
        if self.mode == "skip":  # looked at before each optimizer step (what is held is the open window)
            self._report(accelerator)
            return
        first = self._first_bad(accelerator)
        if first is None:
            return
        where = _where(first)
        where = where[0].upper() + where[1:]
        if self.mode == "warn":
            if accelerator.is_main_process:
                warnings.warn(f"{where} was not finite (NaN or inf); training goes on "
                              "(Trainer(on_nonfinite_loss='warn')).", RuntimeWarning, stacklevel=2)
            return
        raise ValueError(
            f"{where} was not finite (NaN or inf); noticed at global_step {accelerator.step}. (To keep steps "
            "free of device->host waits, losses are checked when values are logged, at epoch ends and before "
            "checkpoints; the optimizer may have stepped on these gradients since, so the weights in memory may "
            "hold NaN/inf; no checkpoint was written after it.) Fix the cause: a lower learning rate, gradient "
            "clipping (Trainer(clip_grad_norm=...)), a numerically safe loss (log of 0, division by 0), bad "
            "input data; or pass Trainer(on_nonfinite_loss='skip') to drop such steps, or 'warn' to train on."
        )

    def _first_bad(self, accelerator: Accelerator) -> tuple[int, int, int] | None:
        """(step, epoch, batch_idx) of the first non-finite loss held, agreed by every process; clears them."""
        pending, self._pending = self._pending, []
        acc = accelerator
        if not pending and acc.num_processes == 1:
            return None
        if pending:
            losses = _stacked([p[0] for p in pending])
            if acc.num_processes == 1:
                # The one device->host read of a check; on the host, Python's isfinite on the values costs less
                # than the device ops (isfinite, all) it replaces (~5 us instead of ~12 us for 10 losses on a CPU).
                for i, value in enumerate(losses.tolist()):
                    if not math.isfinite(value):
                        return pending[i][1:]
                return None
            finite = torch.isfinite(losses)
            # The first non-finite position, or len(pending) when all are finite, computed on the device.
            positions = torch.arange(len(pending), device=finite.device)
            index_t = torch.where(finite, len(pending), positions).min()
        else:  # nothing held here: a position past any other process's
            index_t = torch.tensor(2**62, device=acc.device)
        agreed = int(acc.gather(index_t.reshape(1).to(acc.device)).min())  # every rank holds the same positions
        if agreed >= len(pending):
            return None
        return pending[agreed][1:]


def _stacked(losses: list[torch.Tensor]) -> torch.Tensor:
    """The single-element ``losses`` as one 1-d tensor: one ``stack`` when they share a shape (the usual case,
    5x faster than reshaping each), else each reshaped to a scalar (dtypes are promoted either way)."""
    try:
        return torch.stack(losses).reshape(len(losses))
    except RuntimeError:  # shapes differ, e.g. () and (1,)
        return torch.stack([loss.reshape(()).float() for loss in losses])


def _where(first: tuple[int, int, int]) -> str:
    step, epoch, batch_idx = first
    return f"the loss returned by training_step at global_step {step} (epoch {epoch}, batch_idx {batch_idx})"
