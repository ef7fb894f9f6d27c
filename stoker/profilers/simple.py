"""Lightning's ``pytorch_lightning.profilers.simple`` module path (the profiler: ``stoker/trainer/profilers.py``)."""

from ..trainer.profilers import SimpleProfiler

__all__ = ["SimpleProfiler"]
