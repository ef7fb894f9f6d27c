"""Lightning's ``pytorch_lightning.profilers.base`` module path: the profiler that records nothing
(``stoker/trainer/profilers.py``)."""

from ..trainer.profilers import PassThroughProfiler

__all__ = ["PassThroughProfiler"]
