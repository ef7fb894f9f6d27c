"""What a launcher reports when a worker dies: the status a scheduler reads, and the words an operator reads."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace as Failure

import pytest

from stoker.accelerator import describe_failures, run_outcome
from tests.helpers.forkserver import run_python


def test_a_worker_killed_by_sigkill_gives_137_whatever_its_rank() -> None:
    """torch's launcher stops the surviving workers with SIGTERM; the SIGKILL is the cause and sets the status,
    also when the killed worker is not rank 0 (143 would read as a clean preemption to a scheduler)."""
    assert describe_failures({0: Failure(exitcode=-15), 1: Failure(exitcode=-9)}) == (
        "rank 1 (stopped by signal 9), rank 0 (stopped by signal 15)", 137)


def test_a_signal_stop_reads_as_a_stop_and_a_crash_as_a_failure() -> None:
    assert run_outcome(128 + signal.SIGTERM) == "stopped on SIGTERM (exit code 143)"
    assert run_outcome(128 + signal.SIGUSR1) == f"stopped on SIGUSR1 (exit code {128 + signal.SIGUSR1})"
    assert run_outcome(7) == "failed"
    assert run_outcome(137) == "failed"  # SIGKILL: nothing was saved


SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from stoker.accelerator import ensure_processes
ensure_processes(2)
if os.environ["RANK"] == {victim!r}:
    os.kill(os.getpid(), signal.{sig})
time.sleep(60)
"""


def _launch(tmp_path: Path, victim: str, sig: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    root = str(Path(__file__).resolve().parents[2])
    script.write_text(textwrap.dedent(SCRIPT.format(root=root, victim=victim, sig=sig)))
    env = {**os.environ, "PYTHONPATH": root}
    return run_python([str(script)], env=env, timeout=240)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_launcher_exits_137_when_rank_1_is_sigkilled(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "1", "SIGKILL")
    assert proc.returncode == 137, proc.stderr[-3000:]
    assert "the 2-process run failed: rank 1 (stopped by signal 9)" in proc.stderr, proc.stderr[-3000:]
