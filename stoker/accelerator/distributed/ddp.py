"""The strategies that keep whole parameters on every process: ``SingleDevice`` (one process, one device) and
``DDPStrategy`` (``DistributedDataParallel`` over the processes ``torchrun`` or ``Trainer(devices=N)`` started).

A strategy is built in two steps so that users can configure one before the Accelerator exists:
``Accelerator(strategy=DDPStrategy(find_unused_parameters=True))``; ``strategy.make_strategy`` (the resolver, which
parses strategy names) then calls :meth:`SingleDevice.setup_environment`, which joins the process group (NCCL on
CUDA, gloo on CPU) and picks this process's device. ``FSDPStrategy`` (``fsdp.py``) builds on ``DDPStrategy``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import weakref
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .backends import check_backend


def default_device(cpu: bool = False, local_rank: int = 0) -> torch.device:
    """CUDA (this process's local GPU), then MPS, then CPU; ``cpu=True`` forces CPU."""
    if not cpu and torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if not cpu and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def launched_world_size() -> int:
    """The process count a launcher (torchrun, ``Trainer(devices=N)``) announced, or 1."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class SingleDevice:
    """One process, one device: collectives are identities and nothing is wrapped.

    Example:
        >>> strategy = SingleDevice(torch.device("cpu"))
        >>> strategy.all_reduce(torch.ones(2)).tolist()
        [1.0, 1.0]
    """

    is_distributed = False
    shards_parameters = False  # True when each process holds only a slice of every parameter (FSDP)
    num_processes = 1
    process_index = 0
    local_process_index = 0

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device if device is not None else torch.device("cpu")

    def setup_environment(self, cpu: bool = False) -> None:
        """Picks the device; distributed strategies also join the process group here."""
        self.device = default_device(cpu)

    def setup_precision(self, precision: Any) -> None:
        """Sees the Accelerator's precision object before any model is prepared (FSDP adapts to it)."""

    # -- models ---------------------------------------------------------------------------------------------
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(self.device)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Points ``optimizer`` at the parameters ``setup_module`` produced (FSDP replaces them)."""
        return optimizer

    def no_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def unwrap(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def clip_grad_norm_(self, parameters: list[torch.Tensor], max_norm: float, norm_type: float = 2) -> torch.Tensor:
        """Clips the total gradient norm of ``parameters`` over all processes; returns the norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def model_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full (unsharded) state dict of the unwrapped module; sharded strategies fill it on the main process
        only (every process must call it)."""
        return module.state_dict()

    # -- checkpoints: how this strategy's weights and optimizer state are saved -----------------------------
    saves_in_background = True  # a save's writing may run on a background thread (it needs no collective)

    def checkpoint_files_hold(self, models: list[Any], optimizers: list[Any]) -> tuple[list[Any], list[Any]]:
        """``(models, optimizers)`` whose weights (and open-window gradients) / state a checkpoint writes as its
        own safetensors files; this strategy saves the others itself (:meth:`save_checkpoint_shards`)."""
        return list(models), list(optimizers)

    def save_checkpoint_shards(self, folder: str, models: list[Any], optimizers: list[Any]) -> None:
        """Writes into ``folder`` what :meth:`checkpoint_files_hold` left out (every process calls it)."""

    def checkpoint_shard_files(self, files: list[str]) -> list[str]:
        """The names among a checkpoint's ``files`` that :meth:`save_checkpoint_shards` wrote."""
        return []

    def load_checkpoint_shards(self, folder: str, models: list[Any], optimizers: list[Any]) -> bool:
        """Reads what :meth:`save_checkpoint_shards` wrote into ``models``/``optimizers``; False when this strategy
        saves nothing itself (the checkpoint's own files hold everything)."""
        return False

    # -- collectives ------------------------------------------------------------------------------------------
    def barrier(self) -> None:
        pass

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenates every process's ``tensor`` along dim 0 (sizes along dim 0 may differ between processes)."""
        return tensor if tensor.dim() > 0 else tensor.reshape(1)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return obj

    def any_process(self, flag: bool) -> bool:
        """True on every process when ``flag`` is True on at least one (a stop decision all ranks agree on)."""
        return bool(flag)

    def teardown(self) -> None:
        pass


class DDPStrategy(SingleDevice):
    """Several processes, each with its own device, gradients averaged by ``DistributedDataParallel``.

    The process group comes from the ``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``); an already initialised group is used as it is and left alone at exit.

    Args:
        timeout: Seconds (or a ``timedelta``) a collective may wait for the other processes before failing;
            None: torch's default (10 minutes with NCCL, 30 with gloo). A dead process makes gloo fail at once;
            with NCCL the others fail after this timeout.
        backend: The process group's backend; None: NCCL on CUDA, gloo on CPU.
        comm_hook: Called with each ``DistributedDataParallel`` wrapper, e.g. to register a communication hook.
        **ddp_kwargs: Passed to ``DistributedDataParallel`` (``find_unused_parameters``, ``static_graph``,
            ``bucket_cap_mb``, ``gradient_as_bucket_view``, ...).

    Example:
        >>> accelerator = Accelerator(strategy=DDPStrategy(find_unused_parameters=True))  # under torchrun
    """

    is_distributed = True

    def __init__(self, timeout: float | timedelta | None = None, backend: str | None = None,
                 comm_hook: Any = None, **ddp_kwargs: Any) -> None:
        super().__init__(None)
        if timeout is not None and not isinstance(timeout, timedelta):
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError(f"DDPStrategy(timeout={timeout!r}) must be a positive number of seconds, a "
                                 "timedelta, or None (torch's default).")
            timeout = timedelta(seconds=float(timeout))
        self.timeout = timeout
        self.backend = check_backend(backend, type(self).__name__)  # None: NCCL on CUDA, gloo on CPU
        self.comm_hook = comm_hook  # called with each DistributedDataParallel wrapper (registers a comm hook)
        self.ddp_kwargs = ddp_kwargs
        self._group: Any = None  # the WORLD group this strategy created (and so must destroy)
        self._exit_box: list = []  # what the exit handler destroys (emptied by teardown)
        self._wrapped: weakref.WeakSet = weakref.WeakSet()  # DDP wrappers made here (released at exit)
        self._connected = False

    def adopt_existing_group(self) -> DDPStrategy:
        """Describes torch's default group, which someone else created, instead of ``setup_environment``: joined
        as it is (its device kept), never destroyed by this object. Returns self."""
        self.process_index, self.num_processes = dist.get_rank(), dist.get_world_size()
        self.local_process_index = int(os.environ.get("LOCAL_RANK", "0"))
        on_cuda = dist.get_backend() == "nccl" and torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
        self._connected = True
        return self

    def setup_environment(self, cpu: bool = False) -> None:
        if self._connected:
            return
        self.local_process_index = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = default_device(cpu, self.local_process_index)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if not dist.is_initialized():
            if "MASTER_ADDR" not in os.environ and launched_world_size() > 1:
                raise RuntimeError(
                    f"WORLD_SIZE={launched_world_size()} is set but MASTER_ADDR is not: start the script with "
                    "`torchrun --nproc_per_node=N script.py`, or with Trainer(devices=N)."
                )
            backend = self.backend or ("nccl" if self.device.type == "cuda" else "gloo")
            # torch 2.13: importing torch._dynamo while a process group exists keeps ~10 references to the group
            # for the life of the process (gc cannot see them), so the group and gloo's threads would only be
            # destroyed during interpreter finalization, where this can abort. DistributedDataParallel imports
            # it anyway; imported before the group exists, it holds none.
            # (import_module, not an import statement: `import torch._dynamo` here would make `torch` a local name
            # of this whole function, unbound at the torch.cuda.set_device call above: found on a GPU.)
            importlib.import_module("torch._dynamo")
            # The same for ShardedGradScaler (FSDP with fp16, whichever Accelerator prepares it later): its __init__
            # takes process_group=dist.group.WORLD as a default argument, evaluated when its module is imported.
            importlib.import_module("torch.distributed.fsdp.sharded_grad_scaler")
            if launched_world_size() > 1 or "MASTER_ADDR" in os.environ:
                dist.init_process_group(backend=backend, timeout=self.timeout)
            else:  # one process (e.g. FSDP on one GPU): an in-memory store, no port to collide on
                dist.init_process_group(backend=backend, timeout=self.timeout, store=dist.HashStore(), rank=0,
                                        world_size=1)
            self._group = dist.group.WORLD
            # The group, not this object: the Accelerator may be long gone at exit, and a gloo group left to the
            # interpreter's own shutdown can abort the process ("terminate called without an active exception").
            # In a box the handler empties: atexit keeps its arguments until every handler has run.
            self._exit_box = [self._group]
            atexit.register(_destroy_at_exit, weakref.ref(self), self._exit_box, self._wrapped)
        self.process_index = dist.get_rank()
        self.num_processes = dist.get_world_size()
        self._connected = True

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        module = module.to(self.device)
        if not any(p.requires_grad for p in module.parameters()):
            return module  # nothing to synchronise (a frozen model used for inference)
        ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(module, device_ids=ids, **self.ddp_kwargs)
        if self.comm_hook is not None:
            self.comm_hook(wrapped)
        self._keep_for_release(wrapped)
        return wrapped

    def _keep_for_release(self, wrapper: torch.nn.Module) -> None:
        """A wrapper made here: released with this strategy's group, and with any group destroyed (``_MADE``)."""
        self._wrapped.add(wrapper)
        made_in_this_process(wrapper)

    def no_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager:
        sync_off = getattr(module, "no_sync", None)
        return sync_off() if callable(sync_off) else contextlib.nullcontext()

    def unwrap(self, module: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        return module.module if isinstance(module, DistributedDataParallel) else module

    def _alive(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def barrier(self) -> None:
        if not self._alive():
            return
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])  # NCCL otherwise guesses the device, and may guess wrong
        else:
            dist.barrier()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN}
        if op not in ops:
            raise ValueError(f"all_reduce(op={op!r}) is not a reduction. Expected one of: {tuple(ops)}.")
        out = tensor.clone()
        dist.all_reduce(out, op=ops[op])
        return out / self.num_processes if op == "mean" else out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous() if tensor.dim() > 0 else tensor.reshape(1)
        # Sizes first (one tiny collective), so processes may hold different numbers of rows.
        size = torch.tensor([tensor.shape[0]], device=tensor.device, dtype=torch.int64)
        sizes = [torch.empty_like(size) for _ in range(self.num_processes)]
        dist.all_gather(sizes, size)
        counts = [int(s.item()) for s in sizes]
        longest = max(counts)
        if longest != tensor.shape[0]:
            padded = tensor.new_zeros((longest, *tensor.shape[1:]))
            padded[: tensor.shape[0]] = tensor
            tensor = padded
        parts = [torch.empty_like(tensor) for _ in range(self.num_processes)]
        dist.all_gather(parts, tensor)
        return torch.cat([part[:count] for part, count in zip(parts, counts)], dim=0)

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.num_processes
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self.device)
        return box[0]

    def any_process(self, flag: bool) -> bool:
        out = torch.tensor([1 if flag else 0], device=self.device, dtype=torch.int32)
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return bool(out.item())

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickled Accelerator) uses the live group but does not own it, and wraps nothing yet.
        return {**self.__dict__, "_group": None, "_wrapped": None, "_exit_box": []}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _wrapped=weakref.WeakSet())

    def forget_group(self) -> None:
        """Drops the reference to the process group this strategy created, without destroying it."""
        self._group = None

    def teardown(self) -> None:
        # Only the group we created is ours to destroy; the user may already have destroyed it (or made another).
        group, self._group = self._group, None
        self._exit_box.clear()  # the exit handler must not keep the destroyed group alive
        if group is not None:
            _release(group, self._wrapped)


# Every DDP/FSDP wrapper, device mesh and sharded grad scaler that any strategy made in this process, by id
# (weakly: a DeviceMesh compares equal to another of the same shape, so a WeakSet would keep only one of two).
# Destroying the default group destroys every group, so all of them must let go first, not only the creating
# strategy's: an Accelerator that joined an existing group (Accelerate's scripts make several), or a wrapper that
# is garbage in a reference cycle not yet collected, would otherwise keep the group, and gloo's threads, to the
# interpreter's finalization.
_MADE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def made_in_this_process(thing: Any) -> None:
    """Records a wrapper, device mesh or sharded grad scaler for :func:`_release` and the exit handler."""
    _MADE[id(thing)] = thing


def _release_made_at_exit() -> None:
    """Every wrapper and mesh made in this process lets go of its groups, whoever created the group. Covers a group
    the script created itself (stoker's strategies then own nothing to destroy): after the script's own
    ``destroy_process_group()``, wrappers still alive, or garbage not yet collected, would keep it, and gloo's
    threads, to the interpreter's finalization. Registered when this module is imported, so that it runs after
    the exit handlers registered later (atexit runs them last-in, first-out), the script's among them, which may
    still use a wrapper."""
    with contextlib.suppress(Exception):  # at exit a broken wrapper must not turn a clean exit into a crash
        _let_go(list(_MADE.values()))


atexit.register(_release_made_at_exit)


def _release(group: Any, wrapped: weakref.WeakSet) -> None:
    """Destroys ``group`` if it is still the live default group (not if the user destroyed or replaced it).

    DDP wrappers made on it let go of their reducer first: it holds the last all-reduce's work and buckets, whose
    destruction during interpreter finalization can abort the process. (The wrappers cannot sync any more anyway.)
    When the group is destroyed now, so is every other group, and every wrapper and mesh made in this process by
    any strategy lets go too (see ``_MADE``).
    """
    destroying = dist.is_available() and dist.is_initialized() and dist.group.WORLD is group
    _let_go(list(_MADE.values() if destroying else wrapped))  # _MADE holds every strategy's wrappers
    if destroying:
        dist.destroy_process_group()


def _let_go(things: list[Any]) -> None:
    """Makes each DDP/FSDP wrapper, device mesh or sharded grad scaler in ``things`` drop its references to
    process groups (it cannot communicate afterwards)."""
    for thing in things:
        registry = getattr(thing, "_pg_registry", None)
        if isinstance(registry, dict):  # a DeviceMesh (FSDP2): its registry holds the groups it spans
            registry.clear()
            continue
        for name in ("reducer", "logger", "process_group"):  # each would keep the group alive
            if name in thing.__dict__:
                del thing.__dict__[name]
        if thing.__dict__.get("_comm_hooks"):  # (hook, state) pairs; a hook's state may be a group
            thing.__dict__["_comm_hooks"] = []
        if isinstance(thing, torch.nn.Module):
            _drop_fsdp_groups(thing)


def _drop_fsdp_groups(module: torch.nn.Module) -> None:
    """FSDP2 (torch 2.13): the mesh infos of each ``fully_shard`` unit and of its parameters hold the groups they
    shard over, and their ``DeviceMesh`` holds them in ``_pg_registry`` (a dict gc does not track); the sharded
    parameters keep both to the interpreter's finalization, and with them a destroyed group and gloo's threads."""
    for sub in module.modules():
        get_state = getattr(sub, "_get_fsdp_state", None)
        param_group = getattr(get_state(), "_fsdp_param_group", None) if callable(get_state) else None
        for holder in [param_group, *getattr(param_group, "fsdp_params", ())] if param_group is not None else ():
            for info in (getattr(holder, "mesh_info", None), getattr(holder, "post_forward_mesh_info", None)):
                for name in [n for n in getattr(info, "__dict__", {}) if n.endswith("process_group")]:
                    setattr(info, name, None)
                registry = getattr(getattr(info, "mesh", None), "_pg_registry", None)
                if isinstance(registry, dict):
                    registry.clear()


def _destroy_at_exit(owner: weakref.ref, box: list, wrapped: weakref.WeakSet) -> None:
    strategy = owner()
    if strategy is not None:  # a live strategy's reference would keep the group to the interpreter's finalization
        strategy.forget_group()
    group = box.pop() if box else None
    with contextlib.suppress(Exception):  # at exit a broken group must not turn a clean exit into a crash
        _release(group, wrapped)
