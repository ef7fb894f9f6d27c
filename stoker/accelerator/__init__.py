"""The engine: :class:`Accelerator` and its configuration objects."""

from .accelerator import Accelerator
from .config import DataLoaderConfiguration, ProjectConfiguration
from .operations import send_to_device, set_seed
from .fsdp import FSDPStrategy
from .optimizer import AcceleratedOptimizer, AcceleratedScheduler
from .precision import parse_precision
from .strategy import DDPStrategy, SingleDevice


def load_checkpoint_in_model(*args, **kwargs):  # noqa: ANN001, ANN201 - thin lazy re-export, see weights.py
    """Loads a ``.safetensors``/``.bin`` file or a ``save_model`` folder into a model (see ``weights.py``)."""
    from .weights import load_checkpoint_in_model as load

    return load(*args, **kwargs)


__all__ = [
    "Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler", "DataLoaderConfiguration", "DDPStrategy",
    "FSDPStrategy", "SingleDevice",
    "ProjectConfiguration", "load_checkpoint_in_model", "parse_precision", "send_to_device", "set_seed",
]
