"""Accelerate's ``notebook_launcher`` and ``debug_launcher``: its arguments, translated into one call of the
engine's :func:`~stoker.accelerator.distributed.spawn.run_in_processes` (the code behind
``Trainer(strategy="ddp_fork")`` too).

What differs from Accelerate: the workers are started with ``torch.multiprocessing`` ("fork"), not torch's elastic
agent, so a worker's exception is raised in the caller as itself (its type, chained to a ``WorkerError`` with the
worker's traceback) instead of as a ``ChildFailedError``; ``max_restarts`` restarts the whole group; on one node the
port is ``use_port`` when it is free and a free one otherwise; ``rdzv_conf``, ``rdzv_id``, ``monitor_interval``
and ``log_line_prefix_template`` are accepted and have no effect; several nodes meet statically at
``master_addr:use_port`` (``rdzv_backend="c10d"`` there: use ``stoker launch``); TPUs are not supported.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ...accelerator import (
    Ranks,
    check_can_start,
    free_port,
    parse_precision,
    run_in_processes,
)
from .environment import CPU_VARS, PRECISION_VARS

__all__ = ["PrepareForLaunch", "debug_launcher", "notebook_launcher", "patch_environment"]


@contextlib.contextmanager
def patch_environment(**variables: Any) -> Iterator[None]:
    """Sets each keyword as an environment variable (name upper-cased, value as text) for the ``with`` block, and
    puts back what was there before.

    Example:
        >>> with patch_environment(stoker_example="1"):
        ...     os.environ["STOKER_EXAMPLE"]
        '1'
        >>> "STOKER_EXAMPLE" in os.environ
        False
    """
    saved = {key.upper(): os.environ.get(key.upper()) for key in variables}
    os.environ.update({key.upper(): str(value) for key, value in variables.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def notebook_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int | None = None,
                      mixed_precision: str = "no", use_port: str | int = "29500", master_addr: str = "127.0.0.1",
                      node_rank: int = 0, num_nodes: int = 1, rdzv_backend: str = "static", rdzv_endpoint: str = "",
                      rdzv_conf: dict | None = None, rdzv_id: str = "none", max_restarts: int = 0,
                      monitor_interval: float = 0.1, log_line_prefix_template: str | None = None) -> None:
    """Runs ``function(*args)`` in ``num_processes`` processes of this node (forked: a function defined in a
    notebook cell works), each one rank of the job; an Accelerator built inside joins the others (gloo on the CPU,
    NCCL on GPUs). With one process (``num_processes`` 1, or None on a machine without GPUs) it runs here.

    Build everything that touches a GPU inside ``function``: a process that initialized CUDA cannot fork.

    Example:
        >>> def train(lr):
        ...     accelerator = Accelerator()  # sees num_processes == 2
        ...     ...
        >>> notebook_launcher(train, (3e-4,), num_processes=2)  # doctest: +SKIP

    Raises:
        ValueError: a bad ``mixed_precision``, ``num_processes``, ``node_rank`` or ``rdzv_backend``.
        RuntimeError: this process is already one rank of a launcher, or CUDA was initialized here.
        The first failing worker's own exception (after the other workers were stopped).
    """
    precision = parse_precision(mixed_precision, argument="notebook_launcher(mixed_precision=...)")
    if num_processes is None:
        import torch

        num_processes = torch.cuda.device_count()  # (NVML: this does not initialize CUDA)
    processes, nodes, node = int(num_processes or 1), int(num_nodes), int(node_rank)
    if processes < 1 or nodes < 1 or not 0 <= node < nodes:
        raise ValueError(f"notebook_launcher(num_processes={num_processes}, num_nodes={num_nodes}, node_rank="
                         f"{node_rank}): expected num_processes >= 1, num_nodes >= 1 and 0 <= node_rank < num_nodes.")
    if rdzv_backend not in ("static", "c10d") or (rdzv_backend == "c10d" and nodes > 1):
        raise ValueError(f"notebook_launcher(rdzv_backend={rdzv_backend!r}) with {nodes} node(s): expected 'static' "
                         "(or 'c10d' on one node). For an elastic rendezvous across machines use `stoker launch "
                         "--rdzv_backend c10d`.")
    environment = {var: precision for var in PRECISION_VARS}
    if processes == 1:  # as Accelerate: nothing to start; the launcher's precision still reaches the Accelerator
        with patch_environment(**environment):
            function(*args)
        return
    address, port = master_addr, int(use_port)
    if rdzv_endpoint and nodes > 1:
        address, _, given = rdzv_endpoint.rpartition(":")
        port = int(given)
    if nodes == 1:  # only this machine needs the port: any free one will do when the asked one is taken
        port = free_port(address, port)
    ranks = Ranks(processes, port, nodes=nodes, node_rank=node, master_addr=address)
    _run_with_restarts(function, args, ranks, environment, max_restarts)


def debug_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2) -> None:
    """Runs ``function(*args)`` in ``num_processes`` CPU processes (gloo), for checking distributed code on any
    machine: every Accelerator built inside runs on the CPU.

    Example:
        >>> debug_launcher(train, num_processes=2)  # doctest: +SKIP
    """
    if int(num_processes) < 1:
        raise ValueError(f"debug_launcher(num_processes={num_processes}): expected a count >= 1.")
    environment = {**{var: "no" for var in PRECISION_VARS}, **{var: "true" for var in CPU_VARS}}
    _run_with_restarts(function, args, Ranks(int(num_processes), free_port()), environment, 0)


def _run_with_restarts(function: Callable[..., Any], args: Sequence[Any], ranks: Ranks, environment: dict[str, str],
                       max_restarts: int) -> None:
    name = getattr(function, "__name__", "function")
    check_can_start(f"notebook_launcher({name}, num_processes={ranks.processes})", "fork")  # refused: no retry
    print(f"Launching training on {ranks.processes} processes.", flush=True)
    for attempt in range(int(max_restarts) + 1):
        try:
            run_in_processes(function, args, ranks=ranks, environment=environment,
                             what=f"notebook_launcher({name})")
            return
        except Exception:
            if attempt == int(max_restarts):
                raise
            if ranks.nodes == 1:  # a fresh port: the old store's socket may linger
                ranks = Ranks(ranks.processes, free_port(ranks.master_addr), master_addr=ranks.master_addr)


class PrepareForLaunch:
    """Accelerate's wrapper for ``torch.multiprocessing.start_processes``: called as ``(index, *args)`` in worker
    ``index``, it sets that worker's ``LOCAL_RANK`` and ``RANK`` (from ``NPROC`` and ``NODE_RANK``, for a
    multi-process ``distributed_type``) and calls ``launcher(*args)``. With ``debug=True`` the worker first joins a
    gloo group through the file named by ``ACCELERATE_DEBUG_RDV_FILE``.

    Example:
        >>> import torch.multiprocessing as mp
        >>> mp.start_processes(PrepareForLaunch(train, "MULTI_CPU"), nprocs=2, start_method="fork")  # doctest: +SKIP
    """

    def __init__(self, launcher: Callable[..., Any], distributed_type: Any = "NO", debug: bool = False) -> None:
        self.launcher = launcher
        self.distributed_type = str(getattr(distributed_type, "value", distributed_type))
        self.debug = debug

    def __call__(self, index: int, *args: Any) -> Any:
        if self.debug:
            import torch.distributed as dist

            world = int(os.environ["WORLD_SIZE"])
            store = dist.FileStore(os.environ["ACCELERATE_DEBUG_RDV_FILE"], world)
            dist.init_process_group("gloo", rank=index, store=store, world_size=world)
        elif self.distributed_type.startswith("MULTI_"):
            os.environ["LOCAL_RANK"] = str(index)
            nproc, node = int(os.environ.get("NPROC", 1)), int(os.environ.get("NODE_RANK", 0))
            os.environ["RANK"] = str(nproc * node + index)
        os.environ["FORK_LAUNCHED"] = "1"
        return self.launcher(*args)
