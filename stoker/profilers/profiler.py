"""Lightning's ``pytorch_lightning.profilers.profiler`` module path: the base every profiler extends
(``stoker/trainer/profiler_base.py``)."""

from ..trainer.profiler_base import Profiler

__all__ = ["Profiler"]
