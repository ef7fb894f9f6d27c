"""``Trainer(profiler=...)``: where a run's time goes, as Lightning's ``"simple"``, ``"advanced"`` and ``"pytorch"``.

Owns: the three profilers and how a run drives them. The hook dispatcher (``hooks.py``) times every hook
implementation through :meth:`Profiler.wrap` and marks the stages (a training batch, a training epoch, a
validation / test / predict run) with the hooks that open and close them, so the loops carry no profiling code and
a run without a profiler pays nothing. The run's scope (``run_scope.py``) calls :meth:`Profiler.start` and
:meth:`Profiler.stop`; the report goes to stdout and into ``default_root_dir`` (main process). cProfile and
torch.profiler are imported only when their profiler starts.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AdvancedProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "make_profiler"]

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
    """

    name = "base"

    def __init__(self) -> None:
        self.durations: dict[str, list[float]] = collections.defaultdict(list)
        self._open: dict[str, float] = {}
        self.written: list[str] = []  # files written by the last stop()

    # -- timing ---------------------------------------------------------------------------------------------------
    def begin(self, action: str, *_: Any) -> None:
        self._open[action] = time.perf_counter()

    def end(self, action: str, *_: Any) -> None:
        started = self._open.pop(action, None)
        if started is not None:
            self.durations[action].append(time.perf_counter() - started)

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
    def start(self, fn: str) -> None:
        """A ``fit`` / ``validate`` / ``test`` / ``predict`` call starts (times from here are its own)."""
        self.durations.clear()
        self._open.clear()
        self.begin(f"[Run]{fn}")

    def stop(self, fn: str, folder: str | None) -> None:
        """The call ended: prints the report and writes it into ``folder`` (None: not the main process)."""
        self.end(f"[Run]{fn}")
        self.written = []
        if folder is None:
            return
        text = self.report()
        print(f"{type(self).__name__} report for {fn}:\n{text}", flush=True)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{fn}-profile-{self.name}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.written.append(path)

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
    cumulative time) follow the time table, in ``{default_root_dir}/{fn}-profile-advanced.txt``."""

    name = "advanced"

    def __init__(self, line_count: int = 30) -> None:
        super().__init__()
        self.line_count = line_count
        self._cprofile: Any = None

    def start(self, fn: str) -> None:
        import cProfile

        super().start(fn)
        self._cprofile = cProfile.Profile()
        self._cprofile.enable()

    def stop(self, fn: str, folder: str | None) -> None:
        if self._cprofile is not None:
            self._cprofile.disable()
        super().stop(fn, folder)

    def report(self) -> str:
        import pstats

        text = super().report()
        if self._cprofile is None:
            return text
        out = io.StringIO()
        pstats.Stats(self._cprofile, stream=out).sort_stats("cumulative").print_stats(self.line_count)
        return f"{text}\ncProfile, by cumulative time:\n{out.getvalue()}"


class PyTorchProfiler(Profiler):
    """Lightning's ``"pytorch"``: ``torch.profiler`` over the whole run (CPU, and CUDA when there is a GPU), each
    hook and stage a named range; a Chrome trace ``{default_root_dir}/{fn}-trace.json`` that Perfetto
    (ui.perfetto.dev), ``chrome://tracing`` or TensorBoard's profile plugin open, and torch's operator table.
    A trace of a long run is large: profile a few epochs (``limit_train_batches``)."""

    name = "pytorch"

    def __init__(self, record_shapes: bool = False, profile_memory: bool = False, row_limit: int = 20) -> None:
        super().__init__()
        self.record_shapes, self.profile_memory, self.row_limit = record_shapes, profile_memory, row_limit
        self._torch: Any = None
        self._ranges: dict[str, Any] = {}

    def start(self, fn: str) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._torch = profile(activities=activities, record_shapes=self.record_shapes,
                              profile_memory=self.profile_memory)
        self._torch.__enter__()
        super().start(fn)

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

    def stop(self, fn: str, folder: str | None) -> None:
        self.end(f"[Run]{fn}")
        if self._torch is not None:
            self._torch.__exit__(None, None, None)
        self.written = []
        if folder is None or self._torch is None:
            return
        os.makedirs(folder, exist_ok=True)
        trace = os.path.join(folder, f"{fn}-trace.json")
        self._torch.export_chrome_trace(trace)
        table = self._torch.key_averages().table(sort_by="cpu_time_total", row_limit=self.row_limit)
        text = f"{self.report()}\ntorch.profiler, by CPU time:\n{table}\n"
        print(f"PyTorchProfiler report for {fn} (trace: {trace}):\n{text}", flush=True)
        path = os.path.join(folder, f"{fn}-profile-pytorch.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.written = [trace, path]


_BY_NAME: dict[str, type[Profiler]] = {"simple": SimpleProfiler, "advanced": AdvancedProfiler,
                                       "pytorch": PyTorchProfiler}


def make_profiler(value: Any) -> Profiler | None:
    """``Trainer(profiler=...)``: None, "simple" | "advanced" | "pytorch", or a :class:`Profiler`."""
    if value is None or isinstance(value, Profiler):
        return value
    if isinstance(value, str) and value.lower() in _BY_NAME:
        return _BY_NAME[value.lower()]()
    if not isinstance(value, str):
        raise TypeError(f"Trainer(profiler={value!r}) must be None, a name or a stoker Profiler; got "
                        f"{type(value).__name__}.")
    raise ValueError(f"Trainer(profiler={value!r}) is not a profiler. Expected one of: 'simple', 'advanced', "
                     "'pytorch' (or a Profiler instance).")
