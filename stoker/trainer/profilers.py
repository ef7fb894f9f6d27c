"""``Trainer(profiler=...)``: where a run's time goes, as Lightning's ``"simple"``, ``"advanced"`` and ``"pytorch"``.

Owns: the three profilers and how a run drives them. The hook dispatcher (``hooks.py``) times every hook
implementation through :meth:`Profiler.wrap` and marks the stages (a training batch, a training epoch, a
validation / test / predict run) with the hooks that open and close them, so the loops carry no profiling code and
a run without a profiler pays nothing. The run's scope (``run_scope.py``) calls :meth:`Profiler.run_start` and
:meth:`Profiler.run_stop`; the report goes to stdout and into ``dirpath``, else the run's folder (the first logger's
``log_dir``, else ``default_root_dir``; main process). cProfile and
torch.profiler are imported only when their profiler starts.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import re
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "make_profiler"]

# Stages, as (the hook that opens it, the hook that closes it): timed as a whole, whatever runs inside.
STAGES = {"train batch": ("on_train_batch_start", "on_train_batch_end"),
          "train epoch": ("on_train_epoch_start", "on_train_epoch_end"),
          "validation run": ("on_validation_start", "on_validation_end"),
          "test run": ("on_test_start", "on_test_end"), "predict run": ("on_predict_start", "on_predict_end")}


class Profiler:
    """Base: times named actions (``[Stage]``, ``[Hook]`` and ``[Run]`` names); subclasses add a whole-run tool.

    Example:
        >>> profiler = SimpleProfiler()
        >>> with profiler.profile("[Run]my part"):
        ...     pass
        >>> "[Run]my part" in profiler.report()
        True

    Args:
        dirpath: Folder of the report files; None: the run's folder (the first logger's ``log_dir``, else
            ``default_root_dir``, as Lightning's ``trainer.log_dir``), kept here when a run stops.
        filename: The reports are then ``{dirpath}/{fn}-{filename}.txt`` (``fit-profile.txt``) and :meth:`describe`
            writes ``{dirpath}/{filename}.txt``; None: ``{fn}-profile-{name}.txt``, and :meth:`describe` only prints.
    """

    name = "base"
    records = True  # whether a run wraps its hooks with this profiler (PassThroughProfiler: no)

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath, self.filename = dirpath, filename
        self.durations: dict[str, list[float]] = collections.defaultdict(list)
        self._open: dict[str, float] = {}
        self.written: list[str] = []  # files written by the last stop()

    @property
    def recorded_durations(self) -> dict[str, list[float]]:
        """Lightning's name for :attr:`durations`: each action's durations in seconds, in call order."""
        return self.durations

    # -- timing ---------------------------------------------------------------------------------------------------
    def begin(self, action: str, *_: Any) -> None:
        self._open[action] = time.perf_counter()

    def end(self, action: str, *_: Any) -> None:
        started = self._open.pop(action, None)
        if started is not None:
            self.durations[action].append(time.perf_counter() - started)

    def start(self, action: str) -> None:
        """Starts timing ``action`` (Lightning's call; :meth:`stop` ends it, :meth:`profile` does both)."""
        if action in self._open:
            raise ValueError(f"Profiler.start({action!r}): that action is already being timed; stop({action!r}) "
                             "it first.")
        self.begin(action)

    def stop(self, action: str) -> None:
        """Ends the timing of ``action`` that :meth:`start` began."""
        if action not in self._open:
            raise ValueError(f"Profiler.stop({action!r}): no action {action!r} is being timed; call "
                             f"start({action!r}) first.")
        self.end(action)

    def profile(self, action: str) -> Any:
        """A context manager that times ``action``."""
        import contextlib

        @contextlib.contextmanager
        def timed() -> Any:
            self.begin(action)
            try:
                yield
            finally:
                self.end(action)
        return timed()

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed as ``action`` on each call."""
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

    def run_stop(self, fn: str, folder: str | None) -> None:
        """The call ended: prints the report and writes it into ``folder`` (None: not the main process)."""
        self.end(f"[Run]{fn}")
        self.written = []
        if folder is None:
            return
        text = self.report()
        print(f"{type(self).__name__} report for {fn}:\n{text}", flush=True)
        self.written.append(self._write(self._report_path(fn, folder), text))

    def _report_path(self, fn: str, folder: str) -> str:
        """Where a run's report goes: ``dirpath`` if given (else the run's folder, kept as ``dirpath``)."""
        if self.dirpath is None:
            self.dirpath = folder
        name = f"{fn}-{self.filename}" if self.filename else f"{fn}-profile-{self.name}"
        return os.path.join(self.dirpath, f"{name}.txt")

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
        """Prints the report of what was timed so far; with ``dirpath`` and ``filename`` also writes it to
        ``{dirpath}/{filename}.txt`` (a run does this itself when it stops; this is for timings of your own)."""
        text = self.summary()
        print(f"{type(self).__name__} report:\n{text}", flush=True)
        if self.dirpath is not None and self.filename:
            self._write(os.path.join(self.dirpath, f"{self.filename}.txt"), text)

    def report(self) -> str:
        """The time table: each action's calls, mean, total and share of the run, longest total first."""
        total = sum(sum(v) for k, v in self.durations.items() if k.startswith("[Run]")) or 1e-12
        rows = sorted(((k, len(v), sum(v)) for k, v in self.durations.items() if v), key=lambda r: -r[2])
        width = max([len("Action"), *(len(r[0]) for r in rows)])
        lines = [f"{'Action':<{width}} | {'Calls':>7} | {'Mean (s)':>10} | {'Total (s)':>10} | {'% of run':>8}",
                 "-" * (width + 47)]
        for action, calls, seconds in rows:
            lines.append(f"{action:<{width}} | {calls:>7} | {seconds / calls:>10.6f} | {seconds:>10.4f} | "
                         f"{100 * seconds / total:>7.1f}%")
        return "\n".join(lines) + "\n"


class SimpleProfiler(Profiler):
    """Lightning's ``"simple"``: the time table of every hook and stage, printed at the end of the run and written
    to ``{default_root_dir}/{fn}-profile-simple.txt``."""

    name = "simple"


class AdvancedProfiler(Profiler):
    """Lightning's ``"advanced"``: ``cProfile`` over the whole run; its statistics (top ``line_count`` functions by
    cumulative time) follow the time table, in ``{default_root_dir}/{fn}-profile-advanced.txt``.

    Outside a run, each action timed with :meth:`profile` gets a cProfile of its own (``profiled_actions``; an
    action opened inside another one is part of the outer one's, as Python runs one profiler at a time), shown by
    :meth:`describe`; ``dump_stats=True`` also writes each one to ``{dirpath}/{action}.prof`` for ``pstats`` or
    snakeviz.
    """

    name = "advanced"

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 line_count: int = 30, dump_stats: bool = False) -> None:
        super().__init__(dirpath, filename)
        self.line_count, self.dump_stats = line_count, dump_stats
        self._cprofile: Any = None
        self.profiled_actions: dict[str, Any] = {}  # action -> its cProfile.Profile (actions outside a run)
        self._profiling: str | None = None  # the action whose cProfile is on

    def run_start(self, fn: str) -> None:
        import cProfile

        super().run_start(fn)
        self._cprofile = cProfile.Profile()
        self._cprofile.enable()

    def run_stop(self, fn: str, folder: str | None) -> None:
        if self._cprofile is not None:
            self._cprofile.disable()
        super().run_stop(fn, folder)

    def begin(self, action: str, *_: Any) -> None:
        import cProfile

        super().begin(action)
        if self._cprofile is None and self._profiling is None:  # a run's cProfile already sees everything
            self._profiling = action
            self.profiled_actions.setdefault(action, cProfile.Profile()).enable()

    def end(self, action: str, *_: Any) -> None:
        if action == self._profiling:
            self.profiled_actions[action].disable()
            self._profiling = None
        super().end(action)

    def report(self) -> str:
        import pstats

        profiles = {"cProfile, by cumulative time": self._cprofile} if self._cprofile is not None else \
            {f"cProfile of {action}, by cumulative time": p for action, p in self.profiled_actions.items()}
        text = super().report()
        for title, profile in profiles.items():
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(self.line_count)
            text += f"\n{title}:\n{out.getvalue()}"
        return text

    def describe(self) -> None:
        super().describe()
        if self.dump_stats and self.dirpath is not None:
            os.makedirs(self.dirpath, exist_ok=True)
            for action, profile in self.profiled_actions.items():  # an action name made a safe file name
                profile.dump_stats(os.path.join(self.dirpath, re.sub(r'[\\/:*?"<>|\s]', "_", action) + ".prof"))


class PyTorchProfiler(Profiler):
    """Lightning's ``"pytorch"``: ``torch.profiler`` over the whole run (CPU, and CUDA when there is a GPU), each
    hook and stage a named range; a Chrome trace ``{default_root_dir}/{fn}-trace.json`` that Perfetto
    (ui.perfetto.dev), ``chrome://tracing`` or TensorBoard's profile plugin open, and torch's operator table.
    A trace of a long run is large: profile a few epochs (``limit_train_batches``)."""

    name = "pytorch"

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 record_shapes: bool = False, profile_memory: bool = False, row_limit: int = 20) -> None:
        super().__init__(dirpath, filename)
        self.record_shapes, self.profile_memory, self.row_limit = record_shapes, profile_memory, row_limit
        self._torch: Any = None
        self._ranges: dict[str, Any] = {}

    def run_start(self, fn: str) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._torch = profile(activities=activities, record_shapes=self.record_shapes,
                              profile_memory=self.profile_memory)
        self._torch.__enter__()
        super().run_start(fn)

    def begin(self, action: str, *_: Any) -> None:
        from torch.profiler import record_function

        super().begin(action)
        self._ranges[action] = record_function(action).__enter__()

    def end(self, action: str, *_: Any) -> None:
        opened = self._ranges.pop(action, None)
        if opened is not None:
            opened.__exit__(None, None, None)
        super().end(action)

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        from torch.profiler import record_function

        timed = super().wrap(action, fn)

        @functools.wraps(fn)
        def ranged(*args: Any, **kwargs: Any) -> Any:
            with record_function(action):
                return timed(*args, **kwargs)
        return ranged

    def run_stop(self, fn: str, folder: str | None) -> None:
        self.end(f"[Run]{fn}")
        if self._torch is not None:
            self._torch.__exit__(None, None, None)
        self.written = []
        if folder is None or self._torch is None:
            return
        path = self._report_path(fn, folder)
        trace = os.path.join(os.path.dirname(path), f"{fn}-trace.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._torch.export_chrome_trace(trace)
        text = self.report()
        print(f"PyTorchProfiler report for {fn} (trace: {trace}):\n{text}", flush=True)
        self.written = [trace, self._write(path, text)]

    def report(self) -> str:
        text = super().report()
        if self._torch is None:
            return text
        table = self._torch.key_averages().table(sort_by="cpu_time_total", row_limit=self.row_limit)
        return f"{text}\ntorch.profiler, by CPU time:\n{table}\n"


class PassThroughProfiler(Profiler):
    """Lightning's profiler that records nothing: ``trainer.profiler`` when no profiler was asked for, so that
    ``with self.trainer.profiler.profile("my part"):`` in a module runs either way. A run does not wrap its hooks
    with it (a run without a profiler pays nothing) and it writes no file."""

    name = "passthrough"
    records = False

    def begin(self, action: str, *_: Any) -> None:
        pass

    def end(self, action: str, *_: Any) -> None:
        pass

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def start(self, action: str) -> None:
        pass

    def stop(self, action: str) -> None:
        pass

    def run_start(self, fn: str) -> None:
        pass

    def run_stop(self, fn: str, folder: str | None) -> None:
        self.written = []

    def describe(self) -> None:
        pass


_BY_NAME: dict[str, type[Profiler]] = {"simple": SimpleProfiler, "advanced": AdvancedProfiler,
                                       "pytorch": PyTorchProfiler}


def make_profiler(value: Any) -> Profiler:
    """``Trainer(profiler=...)``: None (a :class:`PassThroughProfiler`), "simple" | "advanced" | "pytorch", or a
    :class:`Profiler`."""
    if value is None:
        return PassThroughProfiler()
    if isinstance(value, Profiler):
        return value
    if isinstance(value, str) and value.lower() in _BY_NAME:
        return _BY_NAME[value.lower()]()
    if not isinstance(value, str):
        raise TypeError(f"Trainer(profiler={value!r}) must be None, a name or a stoker Profiler; got "
                        f"{type(value).__name__}.")
    raise ValueError(f"Trainer(profiler={value!r}) is not a profiler. Expected one of: 'simple', 'advanced', "
                     "'pytorch' (or a Profiler instance).")
