"""Lightning's ``pytorch_lightning.strategies`` names: ``DDPStrategy`` and ``FSDPStrategy`` for
``Trainer(strategy=...)``, so that ``from pytorch_lightning.strategies import DDPStrategy`` runs after renaming.

``DDPStrategy`` takes Lightning's common arguments: ``process_group_backend`` (stoker's ``backend``), ``timeout``,
and every ``DistributedDataParallel`` keyword (``find_unused_parameters``, ``static_graph``,
``gradient_as_bucket_view``, ...). Lightning's plumbing arguments (``accelerator``, ``parallel_devices``,
``cluster_environment``, ``checkpoint_io``, ``precision_plugin``, ``ddp_comm_*``, ``model_averaging_period``,
``start_method``) are refused with what to use instead. ``FSDPStrategy`` is stoker's FSDP2 strategy
(``fully_shard``), not Lightning's FSDP1 one: its arguments are ``auto_wrap_policy``, ``mixed_precision``,
``reshard_after_forward`` and ``fully_shard`` keywords.

Example:
    >>> from stoker.strategies import DDPStrategy
    >>> DDPStrategy(find_unused_parameters=True, process_group_backend="gloo").backend
    'gloo'
"""

from __future__ import annotations

from typing import Any

from ...accelerator import DDPStrategy as _EngineDDP
from ...accelerator import FSDPStrategy

_REFUSED = {
    "accelerator": "Trainer(accelerator=...)",
    "parallel_devices": "Trainer(devices=...)",
    "cluster_environment": "the launcher's environment (torchrun, or Trainer(devices=N))",
    "checkpoint_io": "the Trainer's checkpoints (ModelCheckpoint)",
    "precision_plugin": "Trainer(precision=...)",
    "ddp_comm_state": "DDPStrategy(comm_hook=fn), fn(wrapped_model) registering the hook",
    "ddp_comm_hook": "DDPStrategy(comm_hook=fn), fn(wrapped_model) registering the hook",
    "ddp_comm_wrapper": "DDPStrategy(comm_hook=fn), fn(wrapped_model) registering the hook",
    "model_averaging_period": "stoker.local_sgd.LocalSGD in an Accelerator loop",
    "start_method": "Trainer(devices=N) (stoker starts processes with its own launcher)",
}


class DDPStrategy(_EngineDDP):
    """stoker's DDP strategy with Lightning's argument names (see the module docstring)."""

    def __init__(self, *args: Any, process_group_backend: str | None = None, **kwargs: Any) -> None:
        refused = sorted(set(kwargs) & set(_REFUSED))
        if refused:
            name = refused[0]
            raise TypeError(f"DDPStrategy({name}=...) is Lightning plumbing that stoker does not take; use "
                            f"{_REFUSED[name]} instead.")
        if process_group_backend is not None:
            if kwargs.get("backend") not in (None, process_group_backend):
                raise TypeError("DDPStrategy: pass process_group_backend or backend, not both.")
            kwargs["backend"] = process_group_backend
        super().__init__(*args, **kwargs)


__all__ = ["DDPStrategy", "FSDPStrategy"]
