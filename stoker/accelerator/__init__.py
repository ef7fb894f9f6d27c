"""The engine: :class:`Accelerator` and its configuration objects."""

from .accelerator import Accelerator
from .config import DataLoaderConfiguration, ProjectConfiguration
from .operations import send_to_device, set_seed
from .optimizer import AcceleratedOptimizer, AcceleratedScheduler


def load_checkpoint_in_model(*args, **kwargs):  # noqa: ANN001, ANN201 - thin lazy re-export, see weights.py
    """Loads a ``.safetensors``/``.bin`` file or a ``save_model`` folder into a model (see ``weights.py``)."""
    from .weights import load_checkpoint_in_model as load

    return load(*args, **kwargs)


__all__ = [
    "Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler", "DataLoaderConfiguration",
    "ProjectConfiguration", "load_checkpoint_in_model", "send_to_device", "set_seed",
]
