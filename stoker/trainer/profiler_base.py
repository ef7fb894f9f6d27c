"""The profilers' base: :class:`Profiler` times named actions; the stages a run marks (``STAGES``).

Owns: timing (``begin`` / ``end``, Lightning's ``start`` / ``stop`` / ``profile``; a subclass that overrides
``start`` / ``stop``, as Lightning documents for a profiler of your own, gets every action through them, and its
``summary`` and ``teardown`` are called when a run ends), a data module's hooks timed for
the length of a run (``watch``), the time table, and where a run's report goes (``dirpath`` / ``filename``, the
run's folder, one file per process when there are several). The profilers themselves are in ``profilers.py``
(simple, advanced, pass-through) and ``profiler_torch.py``.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from .overrides import defines_hook

__all__ = ["DATAMODULE_HOOKS", "STAGES", "Profiler"]

# Stages, as (the hook that opens it, the hook that closes it): timed as a whole, whatever runs inside.
STAGES = {"train batch": ("on_train_batch_start", "on_train_batch_end"),
          "train epoch": ("on_train_epoch_start", "on_train_epoch_end"),
          "validation run": ("on_validation_start", "on_validation_end"),
          "test run": ("on_test_start", "on_test_end"), "predict run": ("on_predict_start", "on_predict_end")}

# A data module's hooks that a run calls (timed as ``[DataModule]{class}.{hook}`` when its class defines them).
DATAMODULE_HOOKS = ("prepare_data", "setup", "teardown", "state_dict", "load_state_dict", "train_dataloader",
                    "val_dataloader", "test_dataloader", "predict_dataloader")
_ABSENT = object()
log = logging.getLogger("stoker.profiler")  # where the run's reports go when it takes INFO records


class Profiler:
    """Base: times named actions (``[Stage]``, ``[Hook]`` and ``[Run]`` names); subclasses add a whole-run tool.

    Example:
        >>> profiler = Profiler()
        >>> with profiler.profile("[Run]my part"):
        ...     pass
        >>> "[Run]my part" in profiler.report()
        True

    Args:
        dirpath: Folder of the report files; None: the run's folder (the first logger's ``log_dir``, else
            ``default_root_dir``, as Lightning's ``trainer.log_dir``), kept here when a run stops.
        filename: The reports are then ``{dirpath}/{fn}-{filename}.txt`` (``fit-profile.txt``) and :meth:`describe`
            writes ``{dirpath}/{filename}.txt``; None: ``{fn}-profile-{name}.txt``, and :meth:`describe` only shows it.
    """

    name = "base"
    extended = True  # the table's calls and shares of the run (SimpleProfiler(extended=False) leaves them out)
    records = True  # whether a run wraps its hooks with this profiler (PassThroughProfiler: no)
    _own_timing = False  # set for subclasses with their own start/stop (Lightning's way to write a profiler)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._own_timing = cls.start is not Profiler.start or cls.stop is not Profiler.stop

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath, self.filename = dirpath, filename
        self.durations: dict[str, list[float]] = collections.defaultdict(list)
        self._open: dict[str, float] = {}
        self.start_time = time.perf_counter()  # what "% of run" is a share of outside a run (Lightning's name)
        self.written: list[str] = []  # files written by the last stop()
        self._watched: list[tuple[object, str, object]] = []  # (object, hook, its own instance attribute or _ABSENT)

    @property
    def recorded_durations(self) -> dict[str, list[float]]:
        """Lightning's name for :attr:`durations`: each action's durations in seconds, in call order."""
        return self.durations

    # -- timing ---------------------------------------------------------------------------------------------------
    def _open_action(self, action: str) -> None:
        """Starts recording ``action`` (subclasses add their own recording around it)."""
        self._open[action] = time.perf_counter()

    def _close_action(self, action: str) -> None:
        started = self._open.pop(action, None)
        if started is not None:
            self.durations[action].append(time.perf_counter() - started)

    def begin(self, action: str, *_: Any) -> None:
        """The run's mark that ``action`` starts: through :meth:`start` when a subclass times actions its own way."""
        (self.start if self._own_timing else self._open_action)(action)

    def end(self, action: str, *_: Any) -> None:
        (self.stop if self._own_timing else self._close_action)(action)

    def start(self, action: str) -> None:
        """Starts timing ``action`` (Lightning's call; :meth:`stop` ends it, :meth:`profile` does both). A profiler
        of your own may override both, as in Lightning: every hook, stage and action of a run then goes through them."""
        if action in self._open:
            raise ValueError(f"Attempted to start {action} which has already started. (Profiler.start({action!r}): "
                             f"that action is already being timed; stop({action!r}) it first.)")
        self._open_action(action)

    def stop(self, action: str) -> None:
        """Ends the timing of ``action`` that :meth:`start` began."""
        if action not in self._open:
            raise ValueError(f"Attempting to stop recording an action ({action}) which was never started. "
                             f"(Profiler.stop({action!r}): no action {action!r} is being timed; call start({action!r}) "
                             "first.)")
        self._close_action(action)

    def profile(self, action: str) -> Any:
        """A context manager that times ``action`` (and gives its name to ``as``)."""
        import contextlib

        @contextlib.contextmanager
        def timed() -> Any:
            self.begin(action)
            try:
                yield action
            finally:
                self.end(action)
        return timed()

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed as ``action`` on each call."""
        if self._own_timing:
            @functools.wraps(fn)
            def marked(*args: Any, **kwargs: Any) -> Any:
                self.start(action)
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.stop(action)
            return marked

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:  # setup/teardown get stage= by keyword
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.durations[action].append(time.perf_counter() - started)
        return timed

    # -- a run ----------------------------------------------------------------------------------------------------
    def run_start(self, fn: str) -> None:
        """A ``fit`` / ``validate`` / ``test`` / ``predict`` call starts (times from here are its own)."""
        self.durations.clear()
        self._open.clear()
        self.begin(f"[Run]{fn}")

    def watch(self, datamodule: object | None, base: type) -> None:
        """Times the hooks of ``DATAMODULE_HOOKS`` that ``datamodule`` defines over ``base`` (the ``DataModule``
        class), until :meth:`run_stop`.

        The run calls them at several places (its set-up, checkpoints, loader requests), so the timing wraps them on
        the instance for the run's length, where every caller meets it; hooks the class leaves to the base are left
        alone, so that which hooks the data module defines reads the same during the run."""
        if datamodule is None or not self.records:
            return
        for hook in DATAMODULE_HOOKS:
            if defines_hook(datamodule, hook, base):
                own = datamodule.__dict__.get(hook, _ABSENT)
                self._watched.append((datamodule, hook, own))
                setattr(datamodule, hook, self.wrap(f"[DataModule]{type(datamodule).__name__}.{hook}",
                                                    getattr(datamodule, hook)))

    def _unwatch(self) -> None:
        """Gives the watched objects their hooks back as they were."""
        while self._watched:
            obj, hook, own = self._watched.pop()
            if own is _ABSENT:
                delattr(obj, hook)
            else:
                setattr(obj, hook, own)

    def run_stop(self, fn: str, folder: str | None, rank: int | None = None) -> None:
        """The call ended: writes the report into ``folder`` (None: nowhere); ``rank``: this process's, when the run
        has several (each writes its own report, named ``-{rank}``; the first one shows it). Then :meth:`teardown`."""
        self._unwatch()
        self.end(f"[Run]{fn}")
        self._stop_recording()
        self.written = []
        try:
            if folder is not None:
                self._publish(fn, self._report_path(fn, folder, rank), rank)
        finally:
            self.teardown(fn)

    def _stop_recording(self) -> None:
        """Ends a whole-run recorder (cProfile, torch.profiler) before the report is made; the base has none."""

    def _publish(self, fn: str, path: str, rank: int | None, note: str = "") -> None:
        """Writes the run's report to ``path``; the first process also shows it. An empty summary (a profiler of
        your own with nothing to say) is neither shown nor written."""
        text = self.summary()
        if not text:
            return
        if not rank:
            self._show(text, fn, note)
        self.written.append(self._write(path, text))

    def _show(self, text: str, fn: str | None = None, note: str = "") -> None:
        """Shows a report through the ``stoker.profiler`` logger when that takes INFO records (Lightning logs its
        reports; ``logging.getLogger("stoker").setLevel("INFO")`` and a handler route them), else on standard output."""
        name = type(self).__name__
        if log.isEnabledFor(logging.INFO):
            log.info("%sProfiler Report (%s%s):\n%s", f"{fn.upper()} " if fn else "", name, note, text)
        else:
            print(f"{name} report{f' for {fn}' if fn else ''}{note}:\n{text}", flush=True)

    def teardown(self, stage: str | None) -> None:
        """Called when a run ends, after its report (Lightning's hook: a profiler of your own may reset its state
        here); the base keeps its times until the next run starts."""

    def _report_path(self, fn: str, folder: str, rank: int | None) -> str:
        """Where a run's report goes: ``dirpath`` if given (else the run's folder, kept as ``dirpath``)."""
        if self.dirpath is None:
            self.dirpath = folder
        name = f"{fn}-{self.filename}" if self.filename else f"{fn}-profile-{self.name}"
        return os.path.join(self.dirpath, name + ("" if rank is None else f"-{rank}") + ".txt")

    @staticmethod
    def _write(path: str, text: str) -> str:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def summary(self) -> str:
        """Lightning's name for :meth:`report`."""
        return self.report()

    def describe(self) -> None:
        """Shows the report of what was timed so far (as a run's: logged or printed); with ``dirpath`` and
        ``filename`` also writes it to ``{dirpath}/{filename}.txt`` (a run does this itself when it stops; this is for
        timings of your own). Then :meth:`teardown`, as after a run."""
        text = self.summary()
        self._show(text)
        if self.dirpath is not None and self.filename:
            self._write(os.path.join(self.dirpath, f"{self.filename}.txt"), text)
        self.teardown(None)

    def report(self) -> str:
        """The time table: each action's calls, mean, total and share of the time (the run's, else the time since
        the profiler was made), longest total first; without ``extended``, the means and totals only."""
        total = sum(sum(v) for k, v in self.durations.items() if k.startswith("[Run]")) or \
            max(time.perf_counter() - self.start_time, 1e-12)
        rows = sorted(((k, len(v), sum(v)) for k, v in self.durations.items() if v), key=lambda r: -r[2])
        width = max([len("Action"), *(len(r[0]) for r in rows)])
        # columns as (title, width, the cell of a row (action, calls, seconds)); the calls and shares are "extended"
        columns = [("Calls", 7, lambda c, s: f"{c:>7}")] * self.extended + \
            [("Mean (s)", 10, lambda c, s: f"{s / c:>10.6f}"), ("Total (s)", 10, lambda c, s: f"{s:>10.4f}")] + \
            [("% of run", 8, lambda c, s: f"{100 * s / total:>7.1f}%")] * self.extended
        lines = [" | ".join([f"{'Action':<{width}}", *(f"{title:>{w}}" for title, w, _ in columns)]),
                 "-" * (width + sum(w + 3 for _, w, _ in columns))]
        for action, calls, seconds in rows:
            lines.append(" | ".join([f"{action:<{width}}", *(cell(calls, seconds) for _, _, cell in columns)]))
        return "\n".join(lines) + "\n"
