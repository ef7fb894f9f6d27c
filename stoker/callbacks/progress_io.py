"""Printing while a terminal progress bar is drawn: ``sys.stdout`` goes through the bar, so that a ``print`` (plain,
``module.print``, ``trainer.print``) lands on its own line above the bar instead of after it.

Only while a tqdm bar is on screen (``ProgressBar`` installs it when it draws one and restores the stream it found
when the last bar closes); off a terminal there is nothing to protect and nothing is redirected. A complete line
costs one clear and one redraw of the bar; a partial line (``print(..., end="")``) waits for its newline.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import IO, Any

__all__ = ["StdoutThroughBar"]


class StdoutThroughBar(io.TextIOBase):
    """``sys.stdout`` while a bar is shown: each complete line is written with the bar cleared, then redrawn.

    Args:
        stream: The stdout it stands in for (restored by :meth:`restore`).
        bar: Returns the tqdm bar on screen now, or None (lines are then written straight through).

    Example:
        >>> redirect = StdoutThroughBar.install(lambda: bar.tqdm)     # doctest: +SKIP
        >>> print("epoch 3 looks good")                               # above the bar, which is redrawn below
        >>> redirect.restore()                                        # doctest: +SKIP
    """

    def __init__(self, stream: IO[str], bar: Callable[[], Any]) -> None:
        super().__init__()
        self.stream = stream
        self._bar = bar
        self._pending = ""

    @classmethod
    def install(cls, bar: Callable[[], Any]) -> StdoutThroughBar:
        redirect = cls(sys.stdout, bar)
        sys.stdout = redirect
        return redirect

    def restore(self) -> None:
        """Gives stdout back (unless someone replaced it since) and writes a pending partial line."""
        if sys.stdout is self:
            sys.stdout = self.stream
        if self._pending:
            self.stream.write(self._pending)
            self._pending = ""
        self.stream.flush()

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            lines, self._pending = self._pending.rsplit("\n", 1)
            bar = self._bar()
            if bar is not None:
                bar.clear()  # the bar's line is blanked and the cursor is back at its start
            self.stream.write(lines + "\n")
            self.stream.flush()
            if bar is not None:
                bar.refresh()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")
