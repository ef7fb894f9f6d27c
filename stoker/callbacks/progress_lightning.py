"""`TQDMProgressBar`: Lightning's progress bar, `ProgressBar` with its count redrawn every n batches.

Lightning's refresh rate is a number of batches; the values beside the count still refresh on time (`ProgressBar`'s
clock), since reading them from the device at every redraw would make each step wait for it.
"""

from __future__ import annotations

import os

from stoker.callbacks.progress import ProgressBar

__all__ = ["TQDMProgressBar"]


def _batches_per_refresh(refresh_rate: int) -> int:
    """Lightning's environment rules: in Colab (``COLAB_GPU``) a rate of 1 becomes 20, which its output keeps up
    with; ``TQDM_MINITERS`` is a floor on the rate (and turns on a bar given 0)."""
    if os.environ.get("COLAB_GPU") and refresh_rate == 1:
        return 20
    floor = os.environ.get("TQDM_MINITERS")
    if floor is not None:
        try:
            return max(int(floor), refresh_rate)
        except ValueError:
            raise ValueError(f"TQDM_MINITERS={floor!r} must be a whole number of batches.") from None
    return refresh_rate


class TQDMProgressBar(ProgressBar):
    """Lightning's progress bar: the count is redrawn every ``refresh_rate`` batches (and at a bar's last batch).

    The values shown beside the count (the loss, ``v_num``, the ``prog_bar`` metrics) are read from the device at
    most every ``seconds`` (and at each epoch's and validation's end), whatever ``refresh_rate`` is: reading them at
    every redraw would make each step wait for the device. ``seconds=0`` reads them at every redraw, as Lightning.
    ``leave=False`` (Lightning's default): one training bar for the whole fit; ``True``: one per epoch, kept.
    ``process_position`` moves the bars down that many pairs of lines, below bars of your own.

    Example:
        >>> from stoker.callbacks import TQDMProgressBar
        >>> TQDMProgressBar(refresh_rate=20).refresh_rate  # batches
        20
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False,
                 seconds: float = 0.5) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(f"TQDMProgressBar(refresh_rate={refresh_rate!r}) must be a number of batches >= 0 "
                             "(0 disables the bar).")
        if isinstance(process_position, bool) or not isinstance(process_position, int) or process_position < 0:
            raise ValueError(f"TQDMProgressBar(process_position={process_position!r}) must be an integer >= 0.")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise ValueError(f"TQDMProgressBar(seconds={seconds!r}) must be a number of seconds >= 0.")
        super().__init__(refresh_rate=seconds, leave=leave)
        self._refresh_rate = _batches_per_refresh(refresh_rate)
        self._enabled = self._refresh_rate > 0
        self.process_position = process_position
        self.seconds = float(seconds)

    @property
    def batches_per_refresh(self) -> int:
        """``refresh_rate``, by the name earlier stoker releases gave it."""
        return int(self._refresh_rate)

    def _redraw_due(self, n: int, total: int | None, now: float) -> bool:
        return n % self._refresh_rate == 0 or n == total
