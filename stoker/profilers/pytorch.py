"""Lightning's ``pytorch_lightning.profilers.pytorch`` module path, with its flag for torch's Kineto tracer."""

import torch

from ..trainer.profilers import PyTorchProfiler

# Whether this torch build has Kineto, the tracer behind torch.profiler's traces (Lightning's name for the fact).
_KINETO_AVAILABLE: bool = torch.autograd.kineto_available()

__all__ = ["PyTorchProfiler"]
