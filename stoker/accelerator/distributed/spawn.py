"""Running a function in N new processes of this one, as N ranks of ``torchrun``: the one implementation behind
``Trainer(strategy="ddp_spawn" / "ddp_fork")`` and ``notebook_launcher`` / ``debug_launcher``.

Unlike ``launch.py`` (which re-runs the whole program), the calling process stays one process: a test session or a
notebook can train on several processes and go on afterwards. :func:`run_in_processes`

1. starts the workers with ``torch.multiprocessing`` ("fork": a function defined in a notebook cell works;
   "spawn": it must be importable), each with torchrun's rank environment (``RANK``, ``LOCAL_RANK``,
   ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and the caller's extra
   variables; an Accelerator built in a worker joins the process group the normal distributed way;
2. runs ``function(*args)`` in each; a group the function left open is ended there (all ranks meet, then it is
   destroyed), as ``Accelerator.end_training()`` would;
3. waits for every worker. A worker that raises writes its exception and traceback before it exits; the caller
   stops the other workers (SIGTERM, then SIGKILL after 5 s) and raises that exception, chained to a
   :class:`WorkerError` holding the worker's traceback. Every worker has exited when the call returns.

It owns process start, rank environment and error propagation; what a worker does (and what it sends back, beyond
rank 0's return value) is the caller's.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

_RETURNED, _ERROR = "returned.pt", "error-{rank}.pt"


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its traceback (the cause of the worker's own exception)."""


@dataclass(frozen=True)
class Ranks:
    """Where the workers of this node sit in the job: ``processes`` per node, on ``nodes`` nodes, this one being
    ``node_rank``; they meet at ``master_addr:master_port``."""

    processes: int
    master_port: int
    nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"

    def environment(self, local_rank: int) -> dict[str, str]:
        """torchrun's variables for the worker ``local_rank`` of this node."""
        n = self.processes
        return {"RANK": str(self.node_rank * n + local_rank), "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(n * self.nodes), "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": str(self.node_rank),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


def free_port(address: str = "127.0.0.1", preferred: int | None = None) -> int:
    """``preferred`` when it can be bound on ``address`` now, else a port the system says is free."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {address}")


def check_can_start(what: str, start_method: str) -> None:
    """Refuses to start workers inside a process that already is one rank, or to fork after CUDA was initialized.

    Raises:
        RuntimeError: ``WORLD_SIZE`` is set (a launcher started this process), or "fork" with CUDA initialized or
            with a process group of this process still open (the forked workers would inherit it and meet in it
            instead of their own: a hang).
    """
    if "WORLD_SIZE" in os.environ:
        raise RuntimeError(f"{what} starts its own processes, but this process is already one rank of "
                           f"{os.environ['WORLD_SIZE']} (WORLD_SIZE is set: started by torchrun, `stoker launch` or "
                           "another launcher). Call the function directly there, or run this from a plain process.")
    if start_method == "fork" and torch.cuda.is_initialized():
        raise RuntimeError(f"{what} forks its processes, but CUDA was already initialized in this one, and a forked "
                           "process cannot use it. Restart the notebook (or the program) and touch no GPU before "
                           "the launch: build models, tensors on 'cuda' and the Accelerator inside the function.")
    import torch.distributed as dist

    if start_method == "fork" and dist.is_available() and dist.is_initialized():
        raise RuntimeError(f"{what} forks its processes, but this process still has a torch.distributed process group "
                           "open (an Accelerator or Trainer with a distributed strategy built here), and forked "
                           "workers would inherit it instead of forming their own. End it first "
                           "(accelerator.end_training() or torch.distributed.destroy_process_group()), or build the "
                           "Accelerator inside the launched function only.")


@dataclass
class WorkerCall:
    """Everything a worker receives (pickled once per worker by the "spawn" start method)."""

    function: Callable[..., Any]
    args: tuple
    ranks: Ranks
    folder: str
    environment: dict[str, str] = field(default_factory=dict)
    send_back: bool = False  # rank 0 writes its return value for the caller


def run_in_processes(function: Callable[..., Any], args: Sequence[Any] = (), *, ranks: Ranks,
                     start_method: str = "fork", environment: dict[str, str] | None = None, what: str = "",
                     send_back: bool = False, started: Callable[[list[int]], None] | None = None) -> Any:
    """Runs ``function(*args)`` in ``ranks.processes`` new processes; returns rank 0's return value when
    ``send_back`` (else None). ``what`` names the call in errors (e.g. ``"notebook_launcher(train)"``);
    ``started`` receives the workers' pids as soon as they exist.

    Example:
        >>> run_in_processes(print, ("hello",), ranks=Ranks(2, free_port()))  # doctest: +SKIP

    Raises:
        The first failing worker's exception (chained to a :class:`WorkerError` with its traceback), or a
        :class:`WorkerError` when a worker died without one (killed by a signal).
    """
    import torch.multiprocessing as mp

    what = what or f"{getattr(function, '__name__', 'function')}() in {ranks.processes} processes"
    check_can_start(what, start_method)
    if start_method == "fork":
        _preload()
    folder = tempfile.mkdtemp(prefix="stoker-spawn-")
    try:
        call = WorkerCall(function, tuple(args), ranks, folder, dict(environment or {}), send_back)
        context = mp.start_processes(_worker, args=(call,), nprocs=ranks.processes, join=False,
                                     start_method=start_method)
        if started is not None:
            started([p.pid for p in context.processes])
        try:
            _wait(context, folder, what, ranks.processes)
        finally:
            stop(context.processes)
        path = os.path.join(folder, _RETURNED)
        return torch.load(path, weights_only=False) if send_back and os.path.exists(path) else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _preload() -> None:
    """Imports here, once, what every worker's Accelerator imports when it joins the process group (torch._dynamo:
    seconds per process, measured 3.7 s in each of 2 forked workers on 2 cores, 0.1 s per launch once imported
    here). Only on a torch built without CUDA: on a CUDA build an import must not risk touching the CUDA driver
    before the fork, and not while this process is in a group of its own (the import would keep the group)."""
    import importlib

    import torch.distributed as dist

    if torch.backends.cuda.is_built() or (dist.is_available() and dist.is_initialized()):
        return
    importlib.import_module("torch._dynamo")
    importlib.import_module("torch.distributed.fsdp.sharded_grad_scaler")


def _wait(context: Any, folder: str, what: str, processes: int) -> None:
    from torch.multiprocessing.spawn import ProcessException

    try:
        while not context.join(grace_period=5):
            pass
    except ProcessException as failure:
        raise_worker_error(folder, what, processes, failure)


def stop(processes: list[Any]) -> None:
    """Ends the workers still running (the caller was interrupted, or another worker failed) and reaps every one."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def raise_worker_error(folder: str, what: str, processes: int, failure: Exception) -> None:
    """Raises the exception of the worker that failed first (its own type, chained to a :class:`WorkerError` with
    the worker's traceback); a :class:`WorkerError` alone when none was recorded (a worker killed by a signal)."""
    reports = []
    for name in os.listdir(folder):
        if name.startswith("error-"):
            try:
                reports.append(torch.load(os.path.join(folder, name), weights_only=False))
            except Exception:  # a report cut short by the stop of its process: the others tell the story
                continue
    if not reports:
        raise WorkerError(f"{what} with {processes} processes: {failure}. The worker printed its own output above, "
                          "if any.")
    first = min(reports, key=lambda report: report["time"])
    cause = WorkerError(f"{what} failed in worker rank {first['rank']} of {processes}:\n\n{first['trace']}")
    try:
        error = pickle.loads(first["error"]) if first["error"] is not None else None
    except Exception:  # an exception class that cannot be rebuilt here (e.g. required keyword arguments)
        error = None
    if not isinstance(error, BaseException):
        raise cause
    raise error from cause


def _worker(local_rank: int, call: WorkerCall) -> None:
    """One worker: its rank's environment, ``function(*args)``, the group it left ended; a failure reported."""
    rank = call.ranks.node_rank * call.ranks.processes + local_rank
    try:
        os.environ.update({**call.environment, **call.ranks.environment(local_rank)})
        # N processes share the cores (torchrun's OMP_NUM_THREADS=1 would come too late: torch is imported).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // call.ranks.processes))
        returned = call.function(*call.args)
        if call.send_back and rank == 0:
            partial = os.path.join(call.folder, _RETURNED + ".partial")
            torch.save(returned, partial)
            os.replace(partial, os.path.join(call.folder, _RETURNED))  # read only once every worker has exited
        _end_group()
    except BaseException as error:  # noqa: B036 - reported, then the process ends without waiting for the others
        _report(call.folder, rank, error)
        # Not a normal exit: its exit handlers would wait on a process group whose other members may be blocked
        # in a collective for this one; the caller stops them.
        os._exit(1)


def _end_group() -> None:
    """A process group the function left open (it built an Accelerator and never called ``end_training()``):
    every rank meets, then it is destroyed, so that no rank leaves while another still needs the store it hosts."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _report(folder: str, rank: int, error: BaseException) -> None:
    """Writes the worker's exception (None when it cannot be pickled) and traceback for the caller; prints the
    traceback too, where the worker's output goes."""
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    print(f"[rank {rank}] {trace}", file=sys.stderr, flush=True)
    try:
        pickled: bytes | None = pickle.dumps(error)
    except Exception:  # an exception that does not pickle: its traceback still goes back
        pickled = None
    torch.save({"rank": rank, "time": time.time(), "trace": trace, "error": pickled},
               os.path.join(folder, _ERROR.format(rank=rank)))
    sys.stdout.flush()
