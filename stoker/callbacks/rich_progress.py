"""`RichProgressBar`: Lightning's progress bar drawn with rich (its `RichProgressBarTheme` is in ``rich_theme.py``).

It is stoker's ``ProgressBar`` (``progress.py``) with another look: that class decides when the bars are made,
counted, redrawn and closed, and what they show; here each bar is a task of one rich live display
(``rich_display.py``) instead of a tqdm line. So the values beside the count are read from the device only when they
are refreshed (every ``seconds``), never at every step; the count of a bar's task is updated at every batch (as
Lightning's, cheap: rich draws only when told, at most ``refresh_rate`` times a second). Off a terminal rich draws
nothing and the plain progress lines of ``ProgressBar`` are printed instead.

rich is optional: it is imported when the first bar is made, and ``RichProgressBar()`` without it raises an
ImportError that says how to install it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from stoker.callbacks.base import TrainerView
from stoker.callbacks.progress import ProgressBar
from stoker.callbacks.rich_theme import RichProgressBarTheme, require_rich

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, TaskID

    from stoker.callbacks.progress_draw import DrawnBar
    from stoker.callbacks.rich_display import RichTask

__all__ = ["RichProgressBar", "RichProgressBarTheme"]  # the theme also here: Lightning has it in this module


def __getattr__(name: str) -> Any:
    # rich's `Progress` by this module's name (Lightning's module has it), imported only when asked for.
    if name == "Progress":
        from rich.progress import Progress

        return Progress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RichProgressBar(ProgressBar):
    """Progress bars drawn with `rich <https://github.com/Textualize/rich>`_ (``pip install rich``).

    The same bars as :class:`ProgressBar` — one per training epoch (or one for the whole fit), one per validation,
    test and predict — with a colored bar, ``done/total``, elapsed and remaining time, speed, and the loss,
    ``v_num`` and ``prog_bar`` metrics beside the training bar. All bars of a run share one live display; lines
    printed meanwhile appear above it. Off a terminal nothing is drawn and plain progress lines are printed.

    Args:
        refresh_rate: Redraws per second (Lightning's meaning); ``0`` disables the bars.
        leave: Keep each finished epoch's bar on screen (a new one per epoch); ``False``: one bar for the fit.
        theme: The styles.
        console_kwargs: Arguments for rich's console (``rich.reconfigure``), e.g. ``{"force_terminal": True}``.
        seconds: How often the shown values are read from the device (each read waits for the device).

    Attributes:
        progress: The rich ``Progress`` of the latest run (None before a bar is made); its ``tasks`` are the bars.

    Example:
        >>> from stoker.callbacks import RichProgressBar, RichProgressBarTheme
        >>> bar = RichProgressBar(theme=RichProgressBarTheme(metrics_format=".2e"))
        >>> bar.refresh_rate, bar.theme.metrics_format
        (100, '.2e')
    """

    stdout_through_bar = False  # rich's live display sends prints above itself

    def __init__(self, refresh_rate: float = 100, leave: bool = False,
                 theme: RichProgressBarTheme | None = None, console_kwargs: dict[str, Any] | None = None,
                 seconds: float = 0.5) -> None:
        require_rich("RichProgressBar")
        for name, value in (("refresh_rate", refresh_rate), ("seconds", seconds)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"RichProgressBar({name}={value!r}) must be a number >= 0 "
                                 f"({'redraws per second; 0: no bar' if name == 'refresh_rate' else 'seconds'}).")
        if theme is not None and not isinstance(theme, RichProgressBarTheme):
            raise TypeError(f"RichProgressBar(theme={theme!r}) must be a RichProgressBarTheme.")
        super().__init__(refresh_rate=seconds, leave=leave)
        self._refresh_rate = refresh_rate
        self._enabled = refresh_rate > 0
        self._active = True  # enabled before a run too, as Lightning's; `setup` turns it off away from global zero
        self.seconds = float(seconds)
        self.theme = theme or RichProgressBarTheme()
        self.console_kwargs = dict(console_kwargs or {})
        self.progress: Progress | None = None
        self._console: Console | None = None
        self._live = False  # `progress` is drawing (started and not stopped yet)
        self._kept_on_screen = False  # a finished epoch bar stays in the live display (leave=True)
        self._sanity: RichTask | None = None
        self._next_draw = 0.0

    # -- Lightning's names for the bars' tasks ------------------------------------------------------------------
    def _task_id(self, name: str) -> TaskID | None:
        bar = self.bars[name]
        return getattr(bar, "task_id", None) if bar is not None and bar is not self._sanity else None

    @property
    def train_progress_bar_id(self) -> TaskID | None:
        return self._task_id("train")

    @property
    def val_progress_bar_id(self) -> TaskID | None:
        return self._task_id("val")

    @property
    def val_sanity_progress_bar_id(self) -> TaskID | None:
        return None if self._sanity is None else self._sanity.task_id

    @property
    def test_progress_bar_id(self) -> TaskID | None:
        return self._task_id("test")

    @property
    def predict_progress_bar_id(self) -> TaskID | None:
        return self._task_id("predict")

    # -- the display ------------------------------------------------------------------------------------------------
    def configure_columns(self, trainer: TrainerView | None) -> list[ProgressColumn]:
        """The columns of each bar, before the metrics (override to change them): title, bar, batches, time,
        speed."""
        from stoker.callbacks.rich_display import default_columns

        return default_columns(self.theme)

    def console(self) -> Console:
        """rich's console the bars draw on (the global one, reconfigured once with ``console_kwargs``)."""
        if self._console is None:
            import rich

            if self.console_kwargs:
                rich.reconfigure(**self.console_kwargs)
            self._console = rich.get_console()
        return self._console

    def _tty(self) -> bool:
        return self.console().is_terminal

    def _display(self, new: bool = False) -> Progress | None:
        """The live display new bars go to: started with the run's first bar, and anew (``new``) once a finished
        epoch bar should stay on screen above the next; None while the bars are disabled."""
        if self.is_disabled:
            return None
        if self._live and new:
            self._stop_display()
        if not self._live:
            from stoker.callbacks.rich_display import start_progress

            trainer = self._trainer
            self.progress = start_progress(self.configure_columns(trainer), self.theme, self.console())
            self._live, self._kept_on_screen, self._sanity = True, False, None
        return self.progress

    def _stop_display(self) -> None:
        """Stops drawing; the last drawing stays on screen and ``progress`` keeps its tasks for reading."""
        if self._live and self.progress is not None:
            self._live = False
            self.progress.stop()

    def _make_bar(self, description: str, leave: bool, new_display: bool = False) -> RichTask:
        from stoker.callbacks.rich_display import RichTask

        return RichTask(self._display(new_display), description, leave, self.theme)

    # -- the bars' factories (Lightning's tqdm names, as ProgressBar calls them) --------------------------------
    def init_sanity_tqdm(self) -> Any:
        self._sanity = self._make_bar(self.sanity_check_description, leave=False)
        return self._sanity

    def init_train_tqdm(self) -> Any:
        # With `leave`, a finished epoch's bar stays where it is: the next one starts a display of its own below.
        return self._make_bar(self.train_description, leave=True, new_display=self._kept_on_screen)

    def init_validation_tqdm(self) -> Any:
        return self._make_bar(self.validation_description, leave=not self.trainer.fitting)

    def init_test_tqdm(self) -> Any:
        return self._make_bar(self.test_description, leave=True)

    def init_predict_tqdm(self) -> Any:
        return self._make_bar(self.predict_description, leave=True)

    # -- when to redraw -----------------------------------------------------------------------------------------
    def _redraw_due(self, n: int, total: int | None, now: float) -> bool:
        """At most ``refresh_rate`` times a second, and at a bar's last batch."""
        if now < self._next_draw and n != total:
            return False
        self._next_draw = now + 1.0 / self._refresh_rate
        return True

    def _advance(self, bar: DrawnBar, trainer: TrainerView, with_values: bool) -> None:
        # The task counts every batch (no drawing: a few microseconds), as Lightning's does, so rich's speed and
        # time left see each one; the drawing and the values keep their pace.
        if bar.n != bar.tqdm.n:
            bar.tqdm.update(bar.n - bar.tqdm.n)
        super()._advance(bar, trainer, with_values)

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        # The display starts with the fit; the epoch's bar is its first task, added when the epoch starts.
        self._close_train(trainer, close=True)
        self._display()

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        super().on_train_epoch_start(trainer, module)
        bar = self.bars["train"]
        if bar is not None:
            bar.set_description(self._epoch_title(trainer))
        self._next_draw = time.monotonic()

    def _epoch_title(self, trainer: TrainerView) -> str:
        """``Epoch 3/9`` (the last epoch's number when known), as wide as "Validation" so the bars line up."""
        title = f"Epoch {trainer.current_epoch}"
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            title += f"/{trainer.max_epochs - 1}"
        return title.ljust(len(self.validation_description))

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        super().on_train_epoch_end(trainer, module)
        self._kept_on_screen = self.leave

    # -- ending ---------------------------------------------------------------------------------------------------
    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        super().on_exception(trainer, module, exception)
        self._stop_display()

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        super().teardown(trainer, module, stage)
        self._stop_display()

    def __getstate__(self) -> dict[str, Any]:
        # rich's display and console hold locks and the terminal: a pickled copy makes its own.
        return dict(super().__getstate__(), progress=None, _console=None, _live=False, _sanity=None)
