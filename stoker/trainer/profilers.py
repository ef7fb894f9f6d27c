"""``Trainer(profiler=...)``: where a run's time goes, as Lightning's ``"simple"``, ``"advanced"`` and ``"pytorch"``.

Owns: the simple, advanced and pass-through profilers and the choice by name (the base and the run's report files are
``profiler_base.py``, torch.profiler's is ``profiler_torch.py``). The hook dispatcher (``hooks.py``) times every hook
implementation through :meth:`Profiler.wrap` and marks the stages (a training batch, a training epoch, a
validation / test / predict run) with the hooks that open and close them, so the loops carry no profiling code and
a run without a profiler pays nothing. The run's scope (``run_scope.py``) calls :meth:`Profiler.run_start`,
:meth:`Profiler.watch` (the data module's own hooks, which the run calls from several places) and
:meth:`Profiler.run_stop`; the report is shown (logged through the ``stoker.profiler`` logger when it takes INFO
records, else printed) and written into ``dirpath``, else the run's folder (the first logger's ``log_dir``, else
``default_root_dir``). cProfile is imported when its profiler starts, torch.profiler when a PyTorchProfiler is made.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .profiler_base import STAGES, Profiler
from .profiler_torch import PyTorchProfiler

if TYPE_CHECKING:
    import cProfile

__all__ = ["STAGES", "AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler",
           "make_profiler"]


class SimpleProfiler(Profiler):
    """Lightning's ``"simple"``: the time table of every hook and stage, shown at the end of the run and written
    to ``{fn}-profile-simple.txt`` in the run's folder (or ``{dirpath}/{fn}-{filename}.txt``); ``extended=False``
    leaves the calls and shares out of the table."""

    name = "simple"

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath, filename)
        self.extended = extended


class AdvancedProfiler(Profiler):
    """Lightning's ``"advanced"``: ``cProfile`` over the whole run; its statistics (top ``line_count`` functions by
    cumulative time) follow the time table, in ``{fn}-profile-advanced.txt`` in the run's folder.

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
        self._cprofile: cProfile.Profile | None = None
        self.profiled_actions: dict[str, cProfile.Profile] = {}  # action -> its cProfile (actions outside a run)
        self._profiling: str | None = None  # the action whose cProfile is on

    def run_start(self, fn: str) -> None:
        import cProfile

        super().run_start(fn)
        self._cprofile = cProfile.Profile()
        self._cprofile.enable()

    def _stop_recording(self) -> None:
        if self._cprofile is not None:
            self._cprofile.disable()

    def _open_action(self, action: str) -> None:
        import cProfile

        super()._open_action(action)
        if self._cprofile is None and self._profiling is None:  # a run's cProfile already sees everything
            self._profiling = action
            self.profiled_actions.setdefault(action, cProfile.Profile()).enable()

    def _close_action(self, action: str) -> None:
        if action == self._profiling:
            self.profiled_actions[action].disable()
            self._profiling = None
        super()._close_action(action)

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


class PassThroughProfiler(Profiler):
    """Lightning's profiler that records nothing: ``trainer.profiler`` when no profiler was asked for, so that
    ``with self.trainer.profiler.profile("my part"):`` in a module runs either way. A run does not wrap its hooks
    with it (a run without a profiler pays nothing) and it writes no file."""

    name = "passthrough"
    records = False

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def start(self, action: str) -> None:
        pass

    def stop(self, action: str) -> None:
        pass

    def run_start(self, fn: str) -> None:
        pass

    def run_stop(self, fn: str, folder: str | None, rank: int | None = None) -> None:
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
    raise ValueError("When passing string value for the `profiler` parameter of `Trainer`, it can only be one of "
                     f"['simple', 'advanced', 'pytorch']: Trainer(profiler={value!r}) is not a profiler (or pass a "
                     "Profiler instance).")
