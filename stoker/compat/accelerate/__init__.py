"""Accelerate's names that are not the core's own.

- ``accelerator.py``: ``stoker.Accelerator``, the core Accelerator plus Accelerate's arguments and methods
- ``options.py``: kwargs handlers and plugins, validated and handed to the core's objects
- ``kwargs.py``, ``fsdp_plugin.py``: Accelerate's handler and plugin classes
- ``state.py``: ``PartialState``, ``AcceleratorState``, ``GradientState``, ``DistributedType`` as views
- ``environment.py``: the launcher's environment variables as argument defaults
- ``launchers.py``: ``notebook_launcher``, ``debug_launcher`` (the engine's ``run_in_processes``), ``patch_environment``
- ``big_modeling.py``: ``init_empty_weights``, ``init_on_device`` (the engine's ``empty_init``)
- ``trackers.py``: ``log_with`` / ``get_tracker`` by name, built from stoker's loggers, beside custom trackers
- ``tracking.py``: ``accelerate.tracking``'s names: ``GeneralTracker``, the tracker classes (faced by ``stoker.tracking``)
- ``tools.py``, ``operations.py``, ``memory.py``, ``other.py``, ``logging.py``, ``available.py``, ``local_sgd.py``:
  ``accelerate.utils``, ``accelerate.logging`` and ``accelerate.local_sgd`` (faced by ``stoker.utils`` and friends)
"""

from .accelerator import Accelerator

__all__ = ["Accelerator"]
