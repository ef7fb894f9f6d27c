"""Signals and ``Trainer(devices=2)``: a SIGUSR1/SIGTERM/SIGINT sent to the launching process reaches the workers,
which finish their step, save one checkpoint and exit; the launcher waits and exits with their status. And the
processes agree on the highest signal any of them got (not the sum)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_run
from tests.helpers.dist_spawn import REPO, base_env, run_workers
from tests.helpers.forkserver import popen_python

WORKER = REPO / "tests" / "helpers" / "signal_worker.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > end:
            out = proc.communicate(timeout=10)[0] if proc.poll() is not None else ""
            raise AssertionError(f"{path.name} never appeared (launcher status {proc.poll()}): {out[-3000:]}")
        time.sleep(0.1)


def _signal_run(out: Path, sig: signal.Signals) -> dict:
    """Starts the ``Trainer(devices=2)`` script, sends ``sig`` to the launcher once rank 0 trained 2 steps, and
    returns the launcher's status and output, and which workers were still alive right after it exited."""
    proc = popen_python([str(WORKER), str(out)], env=base_env(), cwd=REPO, merge_stderr=True)
    pids: list[int] = []
    try:
        _wait_for(out / "ready", proc, 240)
        pids = [int((out / f"pid{r}").read_text()) for r in range(2)]
        proc.send_signal(sig)
        output = proc.communicate(timeout=90)[0]
        return {"returncode": proc.returncode, "out": output, "alive": [p for p in pids if _alive(p)], "dir": out}
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _agree_run(out: Path) -> list[str]:
    results = run_workers("signal_agree_worker.py", [out], timeout=180)
    return [line.split()[-1] for r in results for line in r.output.splitlines() if line.startswith("agreed")] \
        + ["\n".join(r.output for r in results)]


SIGNALS = [signal.SIGUSR1, signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
SIGNAL_TEST = "test_a_signal_to_the_launcher_reaches_the_workers_which_save_once_and_exit"
# Each launch runs in the background from the session's start (tests/helpers/launches.py).
for _sig in (signal.SIGUSR1, signal.SIGINT, signal.SIGTERM):
    session_run(f"signal_{_sig.name}", f"{SIGNAL_TEST}[{_sig.name}]", module=__name__)(
        functools.partial(_signal_run, sig=_sig))
session_run("signal_agree", "test_processes_agree_on_the_highest_signal_not_the_sum")(_agree_run)


@pytest.mark.distributed
@pytest.mark.timeout(400)
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_to_the_launcher_reaches_the_workers_which_save_once_and_exit(session_launches: Launches,
                                                                             sig: signal.Signals) -> None:
    """Each signal in its own launch (run in the background, ``tests/helpers/launches.py``): status 128+sig, one
    announced save, a checkpoint, and no worker left running once the launcher exited."""
    run = session_launches.result(f"signal_{sig.name}")
    out = run["out"]
    assert run["returncode"] == 128 + sig, out[-3000:]
    assert out.count(f"preempted by {sig.name} at step") == 1, out[-3000:]  # one save, announced once
    assert f"{sig.name} was forwarded to the 2 workers; they stopped with exit code {128 + sig}" in out
    assert (run["dir"] / "checkpoints" / "last.ckpt" / "stoker_manifest.json").exists()
    assert not run["alive"], "workers still running after the launcher exited"


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_processes_agree_on_the_highest_signal_not_the_sum(session_launches: Launches) -> None:
    *agreed, output = session_launches.result("signal_agree")
    # cases: both SIGTERM (15+15 would be 30), SIGTERM and nothing, SIGUSR1 and SIGTERM, nothing at all
    assert agreed == ["15", "15", "15", "None"] * 2, output
