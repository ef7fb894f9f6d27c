"""``Trainer(profiler="pytorch")``: :class:`PyTorchProfiler`, torch.profiler over a run (imported when it starts)."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .profiler_base import Profiler

if TYPE_CHECKING:
    import torch.profiler
    from torch.autograd.profiler_util import EventList

__all__ = ["PyTorchProfiler", "TableKwargsError"]


class TableKwargsError(ValueError, KeyError):
    """``PyTorchProfiler(table_kwargs=...)`` names an argument torch's table does not take (or one the profiler sets
    itself): a ``ValueError``, and a ``KeyError`` too, the class Lightning raises for it, which scripts may catch."""

    __str__ = ValueError.__str__  # the message as written (KeyError's own would quote it)


class PyTorchProfiler(Profiler):
    """Lightning's ``"pytorch"``: ``torch.profiler`` over the whole run (CPU, and CUDA when there is a GPU), each
    hook and stage a named range; a Chrome trace ``{fn}-trace.json`` beside the report that Perfetto
    (ui.perfetto.dev), ``chrome://tracing`` or TensorBoard's profile plugin open, and torch's operator table.
    A trace of a long run is large: profile a few epochs (``limit_train_batches``), or give a ``schedule``.

    Outside a run, the first action timed with :meth:`profile` starts torch.profiler and :meth:`describe` stops it.

    Args:
        sort_by_key, row_limit, table_kwargs: How torch's operator table is sorted, its rows, and other arguments
            of ``key_averages().table`` (``max_name_column_width``, ...).
        export_to_chrome: Write the Chrome trace (not when ``on_trace_ready`` handles the traces).
        group_by_input_shapes: One row of the operator table per operator and input shapes (Lightning's argument;
            the shapes are then recorded, ``record_shapes``, which Lightning asks for separately).
        **profiler_kwargs: Passed to ``torch.profiler.profile``: ``schedule`` (stepped after each training batch),
            ``on_trace_ready``, ``with_stack``, ...
    """

    name = "pytorch"

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 record_shapes: bool = False, profile_memory: bool = False, row_limit: int = 20,
                 sort_by_key: str = "cpu_time_total", export_to_chrome: bool = True,
                 table_kwargs: dict[str, Any] | None = None, group_by_input_shapes: bool = False,
                 **profiler_kwargs: Any) -> None:
        import torch.autograd.profiler_util as util
        import torch.profiler

        super().__init__(dirpath, filename)
        allowed = set(inspect.signature(util.EventList.table).parameters) - {"self", "sort_by", "row_limit"}
        unknown = sorted(set(table_kwargs or {}) - allowed)
        if unknown:
            raise TableKwargsError(f"PyTorchProfiler(table_kwargs=...): {unknown} are not arguments of torch's "
                                   "key_averages().table here (sort_by_key and row_limit have their own); expected "
                                   f"some of {sorted(allowed)}.")
        takes = set(inspect.signature(torch.profiler.profile.__init__).parameters) - {"self"}
        unknown = sorted(set(profiler_kwargs) - takes)
        if unknown:  # refused here, not when a run starts
            raise TypeError(f"PyTorchProfiler(**{{{unknown[0]!r}: ...}}): {unknown} are not arguments of "
                            f"torch.profiler.profile here; expected some of {sorted(takes)}. (Lightning's "
                            "emit_nvtx and record_module_names have no counterpart in stoker.)")
        self.record_shapes = record_shapes or group_by_input_shapes
        self.group_by_input_shapes, self.profile_memory = group_by_input_shapes, profile_memory
        self.row_limit = row_limit
        self.sort_by_key, self.export_to_chrome, self.table_kwargs = sort_by_key, export_to_chrome, table_kwargs or {}
        self.profiler_kwargs = profiler_kwargs
        self._torch: torch.profiler.profile | None = None
        self._own = False  # torch.profiler opened by an action outside a run (describe() closes it)
        self._ranges: dict[str, torch.profiler.record_function] = {}

    def __getstate__(self) -> dict[str, Any]:
        # A copy (deepcopy, or the Trainer sent to spawned processes) holds settings and times, no live profiler.
        return dict(self.__dict__, _torch=None, _own=False, _ranges={}, _watched=[])

    @property
    def function_events(self) -> EventList | None:
        """torch's recorded events (``torch.autograd.profiler_util.EventList``) of the last run or describe()."""
        return None if self._torch is None else self._torch.events()

    def _start_torch(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        kwargs = dict(self.profiler_kwargs)  # activities given there replace the default (CPU, and CUDA if any)
        activities = kwargs.pop("activities", None) or \
            [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._torch = profile(activities=activities, record_shapes=self.record_shapes,
                              profile_memory=self.profile_memory, **kwargs)
        self._torch.__enter__()

    def run_start(self, fn: str) -> None:
        self._start_torch()
        super().run_start(fn)

    def _open_action(self, action: str) -> None:
        from torch.profiler import record_function

        if self._torch is None:
            self._start_torch()
            self._own = True
        super()._open_action(action)
        self._ranges[action] = record_function(action).__enter__()

    def _close_action(self, action: str) -> None:
        opened = self._ranges.pop(action, None)
        if opened is not None:
            opened.__exit__(None, None, None)
        super()._close_action(action)
        if action == "[Stage]train batch" and self._torch is not None and self.profiler_kwargs.get("schedule"):
            self._torch.step()  # a schedule counts training batches

    def wrap(self, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        from torch.profiler import record_function

        timed = super().wrap(action, fn)

        @functools.wraps(fn)
        def ranged(*args: Any, **kwargs: Any) -> Any:
            with record_function(action):
                return timed(*args, **kwargs)
        return ranged

    def describe(self) -> None:
        if self._own and self._torch is not None:
            self._own = False
            self._torch.__exit__(None, None, None)
        super().describe()

    def _stop_recording(self) -> None:
        if self._torch is not None:
            self._torch.__exit__(None, None, None)

    def _publish(self, fn: str, path: str, rank: int | None, note: str = "") -> None:
        if self._torch is None:  # nothing was recorded
            return
        trace = os.path.join(os.path.dirname(path), f"{fn}-trace" + ("" if rank is None else f"-{rank}") + ".json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if self.export_to_chrome and self.profiler_kwargs.get("on_trace_ready") is None:
            self._torch.export_chrome_trace(trace)
            self.written.append(trace)
        super()._publish(fn, path, rank, f" (trace: {trace})")

    def report(self) -> str:
        text = super().report()
        if self._torch is None:
            return text
        averages = self._torch.key_averages(group_by_input_shape=self.group_by_input_shapes)
        table = averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs)
        by = "CPU time" if self.sort_by_key == "cpu_time_total" else self.sort_by_key
        return f"{text}\ntorch.profiler, by {by}:\n{table}\n"
