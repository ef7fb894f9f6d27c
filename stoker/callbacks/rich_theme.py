"""`RichProgressBarTheme`, the styles of a ``RichProgressBar``, and the check that rich is installed: what the rich
bar and table need before rich itself is imported (importing this module does not import rich).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.style import Style

__all__ = ["RichProgressBarTheme", "require_rich"]


def require_rich(owner: str) -> None:
    """Raises a ModuleNotFoundError saying how to install rich when it is missing (found without importing it)."""
    if importlib.util.find_spec("rich") is None:
        raise ModuleNotFoundError(f"{owner} draws with the `rich` package, which is not installed: run "
                                  "`pip install rich` (or `pip install 'stoker[rich]'`), or use the default "
                                  "tqdm bar and table.", name="rich")


@dataclass
class RichProgressBarTheme:
    """The styles of a :class:`RichProgressBar` (any rich style: ``"bold red"``, ``"#6206E0"``, a ``Style``).

    Attributes:
        description: The bar's title ("Epoch 3/9", "Validation").
        progress_bar, progress_bar_finished, progress_bar_pulse: The bar while running, when full, and while
            pulsing (a loader without a length).
        batch_progress: The ``done/total`` count.
        time: The elapsed and remaining time.
        processing_speed: The batches per second.
        metrics: The values beside the count.
        metrics_text_delimiter: Between two values.
        metrics_format: A format spec for numbers (``".3f"``, ``".2e"``); integers and text are shown as they are.
    """

    description: str | Style = ""
    progress_bar: str | Style = "#6206E0"
    progress_bar_finished: str | Style = "#6206E0"
    progress_bar_pulse: str | Style = "#6206E0"
    batch_progress: str | Style = ""
    time: str | Style = "dim"
    processing_speed: str | Style = "dim underline"
    metrics: str | Style = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"
