"""Lightning's ``pytorch_lightning.profilers.advanced`` module path (the profiler: ``stoker/trainer/profilers.py``)."""

from ..trainer.profilers import AdvancedProfiler

__all__ = ["AdvancedProfiler"]
