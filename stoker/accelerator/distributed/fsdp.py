"""FSDP2: every process holds a shard of each parameter (``torch.distributed.fsdp.fully_shard``).

``FSDPStrategy`` shards the layers chosen by a policy, then the root module; parameters become ``DTensor``s.
What that changes elsewhere, and where it is handled:

* **Optimizers.** ``fully_shard`` replaces the module's parameters. An optimizer built before
  ``prepare(model)`` still points at the old ones, so ``setup_optimizer`` swaps them for the sharded ones (as
  Accelerate does). Build it after ``prepare(model)`` and nothing needs remapping.
* **Mixed precision** uses FSDP's own ``MixedPrecisionPolicy``: parameters are all-gathered in bf16/fp16 and
  gradients reduced in fp32; fp16 loss scaling uses ``ShardedGradScaler`` so every process skips the same steps.
* **Gradient clipping** computes the norm over all shards (``DTensor`` reductions) and returns a plain tensor.
* **Checkpoints.** ``save_model`` gathers a full state dict on the main process; ``save_state``/``load_state``
  go through ``torch.distributed.checkpoint`` (:meth:`FSDPStrategy.save_checkpoint_shards`), each process writing
  and reading only its shards.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from .ddp import DDPStrategy, made_in_this_process

Policy = Callable[[nn.Module], bool] | Iterable[type | str] | None


class FSDPStrategy(DDPStrategy):
    """Fully sharded data parallel (FSDP2) over the processes ``torchrun`` started.

    Args:
        auto_wrap_policy: Which submodules get their own ``fully_shard`` (one all-gather each, so peak memory is
            about one such layer unsharded). ``None``: every module held in an ``nn.ModuleList`` (a
            transformer's blocks). A set/list of module classes or class names (``{"Block"}``), or a callable
            ``module -> bool``. The root module is always sharded last.
        mixed_precision: A ``torch.distributed.fsdp.MixedPrecisionPolicy``; by default it follows
            ``Accelerator(mixed_precision=...)`` (bf16/fp16 parameters in compute, fp32 gradient reduction).
        reshard_after_forward: Passed to ``fully_shard`` (None: torch's default).
        timeout: Seconds a collective may wait for the other processes (None: torch's default).
        backend: The process group's backend (None: NCCL on CUDA, gloo on CPU).
        **fsdp_kwargs: More ``fully_shard`` arguments (``offload_policy``, ``shard_placement_fn``, ...).

    Example:
        >>> accelerator = Accelerator(mixed_precision="bf16", strategy=FSDPStrategy(auto_wrap_policy={Block}))
        >>> model = accelerator.prepare(model)          # under torchrun
        >>> optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters()))
    """

    shards_parameters = True

    def __init__(self, auto_wrap_policy: Policy = None, mixed_precision: Any = None,
                 reshard_after_forward: bool | int | None = None, timeout: float | None = None,
                 backend: str | None = None, **fsdp_kwargs: Any) -> None:
        super().__init__(timeout=timeout, backend=backend)
        self.policy = _make_policy(auto_wrap_policy)
        self.mixed_precision = mixed_precision
        self.reshard_after_forward = reshard_after_forward
        self.fsdp_kwargs = fsdp_kwargs
        self._precision: Any = None
        self._mesh: Any = None
        self._replaced: dict[int, tuple[weakref.ref, nn.Parameter]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # A pickled copy starts without this process's mesh and the weak references to replaced parameters.
        return {**super().__getstate__(), "_mesh": None, "_replaced": {}}

    # -- setup ------------------------------------------------------------------------------------------------
    def setup_precision(self, precision: Any) -> None:
        """Adopts the Accelerator's precision: FSDP's mixed-precision policy and, for fp16, a sharded scaler."""
        self._precision = precision
        if precision.scaler is not None:
            # Each process sees only its shard's gradients: the inf check must be all-reduced, or ranks diverge.
            precision.scaler = _sharded_grad_scaler(self.device.type)

    def _mp_policy(self) -> Any:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.mixed_precision is not None:
            return self.mixed_precision
        dtype = getattr(self._precision, "dtype", None)
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype is not None else None)

    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if isinstance(module, FSDPModule):
            return module  # prepared before
        module = module.to(self.device)
        if self._mesh is None:
            self._mesh = init_device_mesh(self.device.type, (self.num_processes,))
            made_in_this_process(self._mesh)
        before = {name: p for name, p in module.named_parameters()}
        kwargs = dict(self.fsdp_kwargs, mesh=self._mesh, mp_policy=self._mp_policy())
        if self.reshard_after_forward is not None:
            kwargs["reshard_after_forward"] = self.reshard_after_forward
        # Children before parents: reversed pre-order visits every module after all of its descendants.
        for name, sub in reversed(list(module.named_modules())):
            if sub is not module and self.policy(sub, name, module) and any(True for _ in sub.parameters()):
                fully_shard(sub, **kwargs)
        fully_shard(module, **kwargs)
        after = dict(module.named_parameters())
        for name, old in before.items():
            if name in after and after[name] is not old:
                self._replaced[id(old)] = (weakref.ref(old), after[name])
        self._keep_for_release(module)  # its mesh infos hold the group
        return module

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Points ``optimizer`` at the sharded parameters that replaced the ones it was built with."""
        swapped: dict[int, nn.Parameter] = {}
        for group in optimizer.param_groups:
            params = []
            for p in group["params"]:
                entry = self._replaced.get(id(p))
                new = entry[1] if entry is not None and entry[0]() is p else p
                if new is not p:
                    swapped[id(p)] = new
                params.append(new)
            group["params"] = params
        if swapped and optimizer.state:
            raise RuntimeError(
                "prepare(optimizer): this optimizer already has state (it stepped before prepare), which cannot "
                "follow its parameters into FSDP shards. Create the optimizer before any step, ideally after "
                "prepare(model)."
            )
        return optimizer

    # -- the step ---------------------------------------------------------------------------------------------
    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return _no_gradient_sync(module)

    def unwrap(self, module: nn.Module) -> nn.Module:
        return module  # fully_shard changes the module in place; it stays the user's object

    def clip_grad_norm_(self, parameters: list[torch.Tensor], max_norm: float, norm_type: float = 2) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    # -- state ------------------------------------------------------------------------------------------------
    def model_state_dict(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict on the main process (gathered shard by shard to CPU); empty elsewhere."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if not _is_sharded(module):
            return module.state_dict() if self.process_index == 0 else {}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(module, options=options)

    def _sharded_state(self, models: list[nn.Module], optimizers: list[Any]) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        state: dict[str, Any] = {f"model_{i}": get_model_state_dict(m) for i, m in enumerate(models)}
        for i, opt in enumerate(optimizers):
            inner = getattr(opt, "optimizer", opt)
            state[f"optimizer_{i}"] = get_optimizer_state_dict(_owner(inner, models), inner)
        return state

    # -- checkpoints: weights and optimizer state go through torch.distributed.checkpoint, every process its shards
    saves_in_background = False  # DCP's save is collective: never off the training thread

    def checkpoint_files_hold(self, models: list[Any], optimizers: list[Any]) -> tuple[list[Any], list[Any]]:
        return [], []

    def save_checkpoint_shards(self, folder: str, models: list[Any], optimizers: list[Any]) -> None:
        """Writes the models' and optimizers' shards into ``folder`` with ``torch.distributed.checkpoint``.

        Every process calls it and writes its own ``__{rank}_0.distcp``; the main process writes ``.metadata``.
        """
        import torch.distributed.checkpoint as dcp

        dcp.save(self._sharded_state(models, optimizers), storage_writer=dcp.FileSystemWriter(folder))

    def checkpoint_shard_files(self, files: list[str]) -> list[str]:
        return [n for n in files if n.endswith(".distcp") or n == ".metadata"]

    def load_checkpoint_shards(self, folder: str, models: list[Any], optimizers: list[Any]) -> bool:
        """Reads what :meth:`save_checkpoint_shards` wrote into the (already prepared) models and optimizers."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        from ..checkpointing.atomic import check_dcp_metadata

        check_dcp_metadata(folder)  # DCP unpickles its .metadata: only after proving it holds nothing but data
        state = self._sharded_state(models, optimizers)
        dcp.load(state, storage_reader=dcp.FileSystemReader(folder))
        for i, model in enumerate(models):
            set_model_state_dict(model, state[f"model_{i}"])
        for i, opt in enumerate(optimizers):
            inner = getattr(opt, "optimizer", opt)
            set_optimizer_state_dict(_owner(inner, models), inner, state[f"optimizer_{i}"])
        return True


def _sharded_grad_scaler(device_type: str) -> Any:
    """torch's ``ShardedGradScaler``, without the warning its DTensor inf check raises on every step."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    class QuietShardedGradScaler(ShardedGradScaler):
        def _unscale_grads_(self, *args: Any, **kwargs: Any) -> Any:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")
                return super()._unscale_grads_(*args, **kwargs)

    import torch.distributed as dist

    # The group explicitly: the default argument is whatever group existed when torch's module was imported.
    scaler = QuietShardedGradScaler(device_type, process_group=dist.group.WORLD)
    made_in_this_process(scaler)  # it holds the default group (its process_group): released with the wrappers
    return scaler


@contextlib.contextmanager
def _no_gradient_sync(module: nn.Module) -> Iterator[None]:
    if not hasattr(module, "set_requires_gradient_sync"):
        yield
        return
    module.set_requires_gradient_sync(False)  # gradients accumulate unsharded, locally, until the sync step
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def _is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in module.modules())


def _owner(optimizer: torch.optim.Optimizer, models: list[nn.Module]) -> nn.Module:
    """The prepared model whose parameters ``optimizer`` updates (the state-dict APIs need it)."""
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for model in models:
        if any(id(p) in ids for p in model.parameters()):
            return model
    raise ValueError(
        "An FSDP optimizer updates none of the prepared models' parameters: prepare the model and its optimizer "
        "with the same Accelerator."
    )


class _InModuleList:
    """The default policy: every module held in an ``nn.ModuleList`` (a transformer's blocks)."""

    def __call__(self, module: nn.Module, name: str, root: nn.Module) -> bool:
        parent = root.get_submodule(name.rpartition(".")[0]) if "." in name else root
        return isinstance(parent, nn.ModuleList)


class _Predicate:
    """A user's ``module -> bool``. (Classes rather than closures, so that a strategy pickles.)"""

    def __init__(self, predicate: Callable[[nn.Module], bool]) -> None:
        self.predicate = predicate

    def __call__(self, module: nn.Module, name: str, root: nn.Module) -> bool:
        return bool(self.predicate(module))


class _ByType:
    """Modules of the given classes or class names."""

    def __init__(self, classes: tuple[type, ...], names: set[str]) -> None:
        self.classes, self.names = classes, names

    def __call__(self, module: nn.Module, name: str, root: nn.Module) -> bool:
        return isinstance(module, self.classes) or type(module).__name__ in self.names


def _make_policy(policy: Policy) -> Callable[[nn.Module, str, nn.Module], bool]:
    """Turns ``FSDPStrategy(auto_wrap_policy=...)`` into ``(module, name, root) -> shard it?``."""
    if policy is None:
        return _InModuleList()
    if callable(policy) and not isinstance(policy, type):
        return _Predicate(policy)
    if isinstance(policy, (str, type)):
        policy = [policy]
    try:
        wanted = list(policy)  # type: ignore[arg-type]
    except TypeError:
        wanted = None
    if wanted is None or not all(isinstance(w, (str, type)) for w in wanted):
        raise TypeError(
            f"FSDPStrategy(auto_wrap_policy={policy!r}) is not a policy. Expected None (the blocks of every "
            "nn.ModuleList), a set of module classes or class names such as {'Block'}, or a callable "
            "module -> bool."
        )
    return _ByType(tuple(w for w in wanted if isinstance(w, type)), {w for w in wanted if isinstance(w, str)})
