"""Starting several processes from a plain ``python script.py``: what ``Trainer(devices=N)`` does.

Under ``torchrun`` (or any launcher that sets ``WORLD_SIZE``) there is nothing to do: each process already is one
rank. Otherwise, when more than one process is asked for, this module re-runs the same command line in N worker
processes through torch's own elastic launcher (``torch.distributed.launcher.api.elastic_launch``, what
``torchrun --standalone`` uses: a c10d rendezvous on 127.0.0.1 with a free port), waits for them, and ends the
launching process with their status. Like under ``torchrun``, the script runs once per process, and the code
before ``Trainer(...)`` also ran once in the launching process.

It owns process counts and re-execution; it does not own process groups (``strategy.py`` joins them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import Any, NoReturn

import torch


def is_launched() -> bool:
    """True inside a process that a launcher (torchrun, elastic_launch, SLURM wrappers) started as one rank."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def resolve_num_processes(devices: Any, accelerator: str = "auto") -> int:
    """The number of processes per node for ``Trainer(accelerator=..., devices=...)``.

    ``devices`` may be an int (``-1``: every GPU), ``"auto"`` (under a launcher: the processes it started on
    this node; else every GPU on a GPU machine, or 1), a numeric string, or a list of GPU indices: only its length
    counts, and process i uses visible GPU i (choose the GPUs with ``CUDA_VISIBLE_DEVICES``).

    Example:
        >>> resolve_num_processes(2, "cpu")
        2
    """
    gpus = torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if devices == "auto" or devices is None:
        if is_launched():  # under torchrun: whatever it started on this node
            return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        return max(gpus, 1)
    if isinstance(devices, (list, tuple)) and devices and all(isinstance(d, int) for d in devices):
        return len(devices)
    if isinstance(devices, int) and not isinstance(devices, bool) and (devices >= 1 or devices == -1):
        if devices == -1:
            return max(gpus, 1)
        if 0 < gpus < devices:  # NCCL cannot put two processes on one GPU
            raise ValueError(
                f"Trainer(devices={devices}) asks for {devices} GPUs but {gpus} are visible. Use devices={gpus} (or "
                "'auto'), or accelerator='cpu' for CPU processes."
            )
        return devices
    raise ValueError(
        f"Trainer(devices={devices!r}) is not a device count. Expected a positive int (processes per node), -1 or "
        "'auto' (every GPU), or a list of GPU indices such as [0, 1]."
    )


def ensure_processes(num_processes: int) -> None:
    """Makes sure this job runs as ``num_processes`` processes per node; returns in each worker process.

    Under a launcher it checks that the launcher started as many processes as asked for. In a plain process
    with ``num_processes > 1`` it re-runs this script in that many workers and never returns (the launching
    process exits with the workers' status).

    Raises:
        ValueError: a launcher started a different number of processes per node than ``num_processes``.
        RuntimeError: the program cannot be re-run (an interactive session or ``python -c``).
    """
    if is_launched():
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        if local != num_processes:
            raise ValueError(
                f"Trainer(devices={num_processes}) but the launcher started {local} processes on this node "
                f"(LOCAL_WORLD_SIZE={local}). Use Trainer(devices={local}) or devices='auto', or start "
                f"`torchrun --nproc_per_node={num_processes}`."
            )
        return
    if num_processes > 1:
        launch_script(num_processes)


def _script_command() -> list[str]:
    """The arguments that re-run this program: ``[script, *argv]`` or ``["-m", module, *argv]``."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is not None and (spec.name or "").split(".")[0] in ("pytest", "_pytest", "unittest"):
        raise RuntimeError(
            f"Trainer(devices=N) starts N processes by re-running the program, which here is `python -m "
            f"{spec.name}`: the whole test session would run N more times. In a test, use "
            "Trainer(strategy='ddp_spawn'), which starts the processes at fit/validate/test/predict, or run the "
            "training script in a subprocess (or under torchrun)."
        )
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    script = getattr(__main__, "__file__", None)
    if not script or not os.path.exists(script):
        raise RuntimeError(
            "Trainer(devices=N) starts N processes by re-running your script, but this program has no script "
            "file (an interactive session, a notebook or `python -c`). Use Trainer(strategy='ddp_notebook') there, "
            "or put the code in a file and run `python file.py` or `torchrun --nproc_per_node=N file.py`."
        )
    return [os.path.abspath(script), *sys.argv[1:]]


# Signals the launching process passes on to its workers (torch's launcher would only kill them on SIGTERM/SIGINT and
# dies at once on SIGUSR1, leaving them to train on unsupervised). Its own handlers keep SIGHUP/SIGQUIT.
FORWARDED = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGUSR1")) if s is not None)


def _worker_pids() -> list[int]:
    """The live worker processes of this launcher: its children that lead their own session (torch's launcher
    starts each worker with ``start_new_session=True``; helpers such as multiprocessing's resource tracker do not)."""
    me, children = os.getpid(), []
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:  # the process is gone (or not ours to read)
                continue
            if int(fields[1]) == me:
                children.append(int(entry))
    else:  # no /proc (macOS): ask ps
        import subprocess

        listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
        children = [int(pid) for pid, ppid in (line.split() for line in listing.splitlines()) if int(ppid) == me]
    leaders = []
    for pid in children:
        try:
            if os.getsid(pid) == pid:
                leaders.append(pid)
        except OSError:
            pass
    return leaders


class _SignalForwarder:
    """Passes SIGTERM/SIGINT/SIGUSR1 that reach the launching process on to every worker, and remembers them.

    The workers decide what a signal means (a Trainer finishes its optimizer step, saves once and exits with
    128 + signal); the launcher keeps supervising them and then exits with their status. A signal that arrives
    before any worker exists ends the launcher at once (there is nothing to save yet).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalForwarder:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _forward(self, signum: int, frame: Any) -> None:
        self.received = signum
        workers = _worker_pids()
        if not workers:
            raise SystemExit(128 + signum)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


def _status(code: Any) -> int:
    """A worker's exit code as a process status: ``-N`` (killed by signal N) becomes 128 + N, as shells report."""
    if not isinstance(code, int) or code == 0:
        return 1
    return 128 - code if code < 0 else code


def describe_failures(failures: Mapping[int, Any]) -> tuple[str, int]:
    """The ranks of a failed multi-process run (``ChildFailedError.failures``), and the status to exit with.

    Ranks that failed on their own (a positive exit code) come first, then those stopped by a signal, which is
    usually the launcher stopping the others after the first failure: ``"rank 1 (exit code 7), rank 0 (stopped by
    signal 15)"``. The status is the first own failure's exit code, else 128 + the signal.
    """
    def order(item: tuple[int, Any]) -> tuple[int, int]:
        code = item[1].exitcode
        if isinstance(code, int) and code > 0:
            return 0, item[0]  # failed on its own
        # SIGTERM is how the launcher stops the others: a worker killed by another signal (SIGKILL: the OOM
        # killer, an operator) is the cause, whatever its rank.
        return (2 if code == -signal.SIGTERM else 1), item[0]

    ordered = sorted(failures.items(), key=order)
    parts = []
    for rank, failure in ordered:
        code = failure.exitcode
        stopped = isinstance(code, int) and code < 0
        parts.append(f"rank {rank} (stopped by signal {-code})" if stopped else f"rank {rank} (exit code {code})")
    return ", ".join(parts), _status(ordered[0][1].exitcode) if ordered else 1


def run_outcome(status: int) -> str:
    """How a launcher reports a run whose status is ``status``: a worker that exited with 128 + a signal the
    Trainer handles (it saved and stopped, e.g. after a scheduler's SIGTERM) *stopped*; anything else *failed*."""
    if status > 128 and status - 128 in FORWARDED:
        return f"stopped on {signal.Signals(status - 128).name} (exit code {status})"
    return "failed"


def launch_script(num_processes: int, *, max_restarts: int = 0) -> NoReturn:
    """Re-runs the current program in ``num_processes`` local worker processes and exits with their status.

    The workers get the ``torchrun`` environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, ...). A worker that fails makes the launcher stop the others. SIGTERM, SIGINT and SIGUSR1
    sent to the launching process are forwarded to every worker (a Trainer there saves a checkpoint once and
    exits); the launcher waits for them and exits with their status (128 + signal after a preemption).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    command = _script_command()
    if "OMP_NUM_THREADS" not in os.environ:
        # N processes on one machine: share the cores instead of each spawning a thread per core (torchrun sets 1).
        os.environ["OMP_NUM_THREADS"] = str(max((os.cpu_count() or 1) // num_processes, 1))
    handled_by_torch = ",".join(n for n in ("SIGHUP", "SIGQUIT") if hasattr(signal, n))
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=num_processes, run_id=f"stoker-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=max_restarts, monitor_interval=0.1,
        start_method="spawn", signals_to_handle=handled_by_torch,
    )
    with _SignalForwarder() as forwarder:
        try:
            elastic_launch(config, sys.executable)(*command)
        except ChildFailedError as error:
            if forwarder.received is not None:
                code = _status(error.get_first_failure()[1].exitcode) if error.failures else 1
                name = signal.Signals(forwarder.received).name
                print(f"stoker: {name} was forwarded to the {num_processes} workers; they stopped with exit code "
                      f"{code}.", file=sys.stderr, flush=True)
            else:
                ranks, code = describe_failures(error.failures)
                print(f"stoker: the {num_processes}-process run {run_outcome(code)}: {ranks}.", file=sys.stderr,
                      flush=True)
            raise SystemExit(code) from None
        except SignalException as signal_:  # SIGHUP/SIGQUIT: torch's launcher stopped the workers
            print(f"stoker: stopped by signal {int(signal_.sigval)}; the workers were asked to stop.",
                  file=sys.stderr, flush=True)
            raise SystemExit(128 + int(signal_.sigval)) from None
    raise SystemExit(0)
