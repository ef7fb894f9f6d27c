"""Signals and ``Trainer(devices=2)``: a SIGUSR1/SIGTERM/SIGINT sent to the launching process reaches the workers,
which finish their step, save one checkpoint and exit; the launcher waits and exits with their status. And the
processes agree on the highest signal any of them got (not the sum)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env, run_workers

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


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=lambda s: s.name)
def test_a_signal_to_the_launcher_reaches_the_workers_which_save_once_and_exit(tmp_path: Path,
                                                                             sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, str(WORKER), str(tmp_path)], env=base_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pids: list[int] = []
    try:
        _wait_for(tmp_path / "ready", proc, 150)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
        proc.send_signal(sig)
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 128 + sig, out[-3000:]
        assert out.count(f"preempted by {sig.name} at step") == 1, out[-3000:]  # one save, announced once
        assert f"{sig.name} was forwarded to the 2 workers; they stopped with exit code {128 + sig}" in out
        assert (tmp_path / "checkpoints" / "last" / "stoker_manifest.json").exists()
        assert not [p for p in pids if _alive(p)], "workers still running after the launcher exited"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_processes_agree_on_the_highest_signal_not_the_sum(tmp_path: Path) -> None:
    results = run_workers("signal_agree_worker.py", [tmp_path], timeout=110)
    agreed = [line.split()[-1] for r in results for line in r.output.splitlines() if line.startswith("agreed")]
    # cases: both SIGTERM (15+15 would be 30), SIGTERM and nothing, SIGUSR1 and SIGTERM, nothing at all
    assert agreed == ["15", "15", "15", "None"] * 2, "\n".join(r.output for r in results)
