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

from typing import TYPE_CHECKING, Any

import torch

from ...accelerator import DDPStrategy as _EngineDDP
from ...accelerator import FSDPStrategy
from ...accelerator.distributed.backends import check_backend

if TYPE_CHECKING:
    from ...trainer import TrainingModule
    from ...trainer.core_trainer import Trainer  # stoker.Trainer's base: its accelerator and module are read here

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
    "start_method": "Trainer(strategy='ddp_spawn') or 'ddp_fork' (or Trainer(devices=N), which re-runs the script)",
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
            kwargs["backend"] = check_backend(process_group_backend, "DDPStrategy", "process_group_backend")
        super().__init__(*args, **kwargs)


class DeepSpeedStrategy:
    """Lightning's DeepSpeed strategy name, so that a script importing it loads; stoker has no DeepSpeed backend."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("DeepSpeedStrategy: stoker has no DeepSpeed backend. Shard the model with "
                         "Trainer(strategy=FSDPStrategy(...)) (stoker's FSDP2), or use Lightning for DeepSpeed.")


class Strategy:
    """What ``trainer.strategy`` answers: Lightning's public strategy attributes, read off the run's Accelerator
    (the engine's own strategy object, ``DDPStrategy`` / ``FSDPStrategy``, is ``trainer.accelerator.strategy``).

    Example:
        >>> from stoker import Trainer
        >>> Trainer(accelerator="cpu").strategy.root_device
        device(type='cpu')
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer  # read when asked: a strategy taken before fit sees the module fit attaches

    accelerator = property(lambda self: self.trainer.accelerator, doc="The run's Accelerator.")
    lightning_module = property(lambda self: self.trainer.module, doc="The module being run (None before a run).")

    @property
    def root_device(self) -> torch.device:
        return self.accelerator.device

    @property
    def model(self) -> TrainingModule | None:
        return self.lightning_module

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def global_rank(self) -> int:
        return self.accelerator.process_index

    @property
    def local_rank(self) -> int:
        return self.accelerator.local_process_index

    @property
    def is_global_zero(self) -> bool:
        return self.accelerator.is_main_process

    def backward(self, closure_loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Lightning's backward entry (``module.manual_backward`` calls it): the backward hooks around the module's
        ``backward``, through the Accelerator. ``optimizer`` is Lightning's argument; stoker's backward needs none."""
        from ...trainer.core_trainer import Trainer as CoreTrainer

        if self.lightning_module is None:
            raise RuntimeError("Strategy.backward: no module is attached to this Trainer (call it inside a fit).")
        CoreTrainer.manual_backward(self.trainer, closure_loss, *args, **kwargs)
        return closure_loss

    def barrier(self, name: str | None = None) -> None:
        self.accelerator.wait_for_everyone()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self.accelerator.broadcast_object(obj, from_process=src)

    def reduce(self, tensor: Any, group: Any = None, reduce_op: str | None = "mean") -> Any:
        """``reduce_op``: "mean" (default) or "sum" over the processes."""
        op = "mean" if reduce_op in (None, "mean", "avg") else reduce_op
        if op not in ("mean", "sum"):
            raise ValueError(f"Strategy.reduce(reduce_op={reduce_op!r}): expected 'mean' or 'sum'.")
        return self.accelerator.reduce(tensor, reduction=op)


__all__ = ["DDPStrategy", "DeepSpeedStrategy", "FSDPStrategy", "Strategy"]


def registered_strategy(strategy: Any) -> Any:
    """Lightning's registered DDP names with their ``find_unused_parameters`` setting in the name
    (``"ddp_find_unused_parameters_true"`` / ``"_false"``) as the ``DDPStrategy`` they stand for, and
    ``"single_device"`` as ``"single"``; anything else as it is. (The spawned forms, ``"ddp_spawn_find_unused_parameters_true"`` and the like, are not taken: pass
    ``"ddp_spawn"``, which builds DDP with torch's default, or a ``DDPStrategy`` under ``torchrun``.)"""
    if isinstance(strategy, str) and strategy.lower() in _FIND_UNUSED:
        return DDPStrategy(find_unused_parameters=_FIND_UNUSED[strategy.lower()])
    if isinstance(strategy, str) and strategy.lower() == "single_device":  # Lightning's name for stoker's "single"
        return "single"
    return strategy


_FIND_UNUSED = {"ddp_find_unused_parameters_true": True, "ddp_find_unused_parameters_false": False}
