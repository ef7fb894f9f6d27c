"""Lightning's ``pytorch_lightning.profilers`` module path: the profilers are in ``stoker/trainer/profilers.py``."""

from ..trainer.profilers import (
    AdvancedProfiler,
    PassThroughProfiler,
    Profiler,
    PyTorchProfiler,
    SimpleProfiler,
)

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]
