"""`RichModelSummary`: the `ModelSummary` table (``summary.py``) drawn as a rich table.

The same rows, totals and run line as ``ModelSummary``; only the drawing differs. rich is optional: it is imported
when the table is drawn, and ``RichModelSummary()`` without it raises an ImportError that says how to install it.
A ``RichProgressBar`` among the Trainer's callbacks makes this the default summary (``trainer/components.py``).
"""

from __future__ import annotations

from stoker.callbacks.rich_theme import require_rich
from stoker.callbacks.summary import ModelSummary, SummaryTable

__all__ = ["RichModelSummary"]

# Columns whose cells are numbers or shapes: right-aligned, so that digits line up.
_RIGHT = {"Params", "Trainable", "Size", "In sizes", "Out sizes"}


class RichModelSummary(ModelSummary):
    """:class:`ModelSummary` drawn with `rich <https://github.com/Textualize/rich>`_ (``pip install rich``): a
    table with a styled header, then the totals and the run's line in bold labels. On a terminal it is colored;
    elsewhere rich writes it as plain text.

    Args:
        max_depth: As ``ModelSummary``: 1 the module's children, n levels, -1 all, 0 no table.
        header_style: The rich style of the header row.

    Example:
        >>> from stoker.callbacks import RichModelSummary
        >>> RichModelSummary(max_depth=2).header_style
        'bold magenta'
    """

    def __init__(self, max_depth: int = 1, header_style: str = "bold magenta") -> None:
        require_rich("RichModelSummary")
        super().__init__(max_depth)
        self.header_style = header_style

    def show(self, table: SummaryTable, run: str) -> None:
        from rich import get_console
        from rich.table import Table
        from rich.text import Text

        drawn = Table(header_style=self.header_style)
        columns = table.columns()
        for title, _ in columns:
            drawn.add_column(title, justify="right" if title in _RIGHT else "left", no_wrap=title == "Name",
                             style="dim" if title == " " else None)
        for row in zip(*(cells for _, cells in columns)):
            drawn.add_row(*(Text(cell) for cell in row))  # names are text, not rich markup
        totals = Table.grid(padding=(0, 1))
        totals.add_column(style="bold")
        totals.add_column()
        for value, label in table.totals():
            totals.add_row(f"{label}:", value)
        console = get_console()
        console.print(drawn)
        console.print(totals)
        console.print(Text(run), soft_wrap=True)
