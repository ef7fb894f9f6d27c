"""``Tqdm``: the tqdm class the progress bars are made of (Lightning's ``callbacks.progress.tqdm_progress`` path).

Imported only when a bar is made (``ProgressBar.init_*_tqdm``), never by ``import stoker``: tqdm loads here. A test
or a script that replaces ``Tqdm`` in this module (by this name or Lightning's path) changes the bars a run makes,
since the factories look the class up here each time.
"""

from __future__ import annotations

from tqdm import tqdm

__all__ = ["Tqdm"]

_WIDTH = 5  # characters a shown float takes at least


class Tqdm(tqdm):
    """tqdm whose shown values keep their width while they change, so a bar's postfix does not jump about.

    Floats, and strings that read as numbers, are padded with zeros after the decimal point up to five characters
    (``1.0`` shows as ``1.000``, ``0.1`` as ``0.100``); integers, scientific notation and other text stay as tqdm
    writes them.

    Example:
        >>> Tqdm.format_num(0.5), Tqdm.format_num(3), Tqdm.format_num(1e-6)
        ('0.500', '3', '1e-6')
    """

    # tqdm's monitor thread loosens the redraw pace of bars that stall; the callback sets the pace itself, so a run
    # (off a terminal too, where the bars only count) starts no thread.
    monitor_interval = 0

    @staticmethod
    def format_num(n: int | float | str) -> str:
        text = n if isinstance(n, str) else tqdm.format_num(n)
        if not isinstance(n, (float, str)) or "e" in text:
            return text
        if "." not in text:
            if len(text) >= _WIDTH:
                return text
            try:
                float(text)
            except ValueError:  # words are shown as they are
                return text
            text += "."
        return text.ljust(_WIDTH, "0")
