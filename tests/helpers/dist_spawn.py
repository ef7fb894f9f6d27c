"""Starts a worker script in several local processes the way ``torchrun`` would (its environment variables), with
gloo on 127.0.0.1, a free port and a hard timeout, and collects what each rank printed and wrote.

Each rank is forked from a server that has already imported torch (``forkserver.py``), so a job costs no
interpreter start-up; worker scripts still run several checks per launch and write their findings as JSON under
``out_dir`` for the test to assert on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.forkserver import parent_environ, popen_python

HELPERS = Path(__file__).resolve().parent
REPO = HELPERS.parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment with one thread per process (two processes share two cores) and the repo importable."""
    env = parent_environ()
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", TORCH_CPP_LOG_LEVEL="ERROR")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(key, None)  # an outer launcher's variables must not leak into the workers
    env.update(extra or {})
    return env


@dataclass
class RankResult:
    rank: int
    returncode: int
    output: str


class WorkersFailed(AssertionError):
    pass


def run_workers(script: str | Path, args: Sequence[str] = (), nprocs: int = 2, timeout: float = 90.0,
                env: dict[str, str] | None = None, check: bool = True,
                on_start: Callable[[list[subprocess.Popen]], None] | None = None) -> list[RankResult]:
    """Runs ``python script *args`` as ``nprocs`` ranks of one job and waits for all of them.

    Args:
        script: A path, or a file name inside ``tests/helpers``.
        args: Command-line arguments for every rank.
        nprocs: Number of processes (the world size).
        timeout: Seconds for the whole job; on expiry every rank is killed and ``WorkersFailed`` is raised.
        env: Extra environment variables.
        check: Raise ``WorkersFailed`` (with every rank's output) when a rank exits non-zero.
        on_start: Optional callable given the list of ``Popen`` objects once they are started.
    """
    path = Path(script) if Path(script).is_absolute() else HELPERS / script
    port = free_port()
    procs: list[subprocess.Popen] = []
    for rank in range(nprocs):
        rank_env = base_env(env)
        rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(popen_python([str(path), *map(str, args)], env=rank_env, cwd=REPO, merge_stderr=True))
    if on_start is not None:
        on_start(procs)
    return collect(procs, timeout, check)


def collect(procs: list[subprocess.Popen], timeout: float, check: bool = True) -> list[RankResult]:
    """Waits for ``procs`` (killing all of them past ``timeout``) and returns their exit codes and output."""
    deadline = time.monotonic() + timeout
    outputs: list[str] = []
    timed_out = False
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            for p in procs:
                _kill(p)
            out, _ = proc.communicate()
        outputs.append(out)
    results = [RankResult(i, p.returncode, o) for i, (p, o) in enumerate(zip(procs, outputs))]
    if timed_out or (check and any(r.returncode != 0 for r in results)):
        report = "\n".join(f"--- rank {r.rank} (exit {r.returncode}) ---\n{r.output[-4000:]}" for r in results)
        raise WorkersFailed(("timed out after %.0fs\n" % timeout if timed_out else "a rank failed\n") + report)
    return results


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_results(out_dir: str | Path, nprocs: int = 2) -> list[dict]:
    """The ``rank{r}.json`` files a worker wrote with :func:`tests.helpers.dist_common.write_result`."""
    return [json.loads((Path(out_dir) / f"rank{r}.json").read_text()) for r in range(nprocs)]
