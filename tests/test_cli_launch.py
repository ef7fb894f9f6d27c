"""``stoker launch`` for real: the Accelerator example in 2 gloo processes, the settings reaching every Accelerator,
SIGTERM forwarded to the workers, and one process run without a launcher (the script replaces ``stoker launch``).

The launches are independent: each runs in the background from the session's start, so that a launcher importing
on one core overlaps other work (``tests/helpers/launches.py``); each test asserts on its own run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_run
from tests.helpers.dist_spawn import REPO, base_env

EXAMPLE = REPO / "examples" / "accelerator_loop.py"
WORKER = REPO / "tests" / "helpers" / "cli_worker.py"
# What the console script runs: `stoker = "stoker.cli:main"` (pyproject [project.scripts]).
CONSOLE_SCRIPT = [sys.executable, "-c", "import sys; from stoker.cli import main; sys.exit(main())"]
MODULE = [sys.executable, "-m", "stoker"]
TIMEOUT = 300


def _run(cmd: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _example_bf16() -> subprocess.CompletedProcess:
    return _run([*CONSOLE_SCRIPT, "launch", "--num_processes", "2", "--cpu", "--mixed_precision", "bf16",
                 str(EXAMPLE), "--samples", "256", "--batch-size", "16", "--epochs", "1"])


def _settings(out: Path) -> tuple[subprocess.CompletedProcess, Path]:
    return _run([*MODULE, "launch", "--num_processes=2", "--cpu", "--mixed_precision=bf16",
                 "--gradient_accumulation_steps=4", "--num_cpu_threads_per_process=1", str(WORKER), str(out),
                 "settings"]), out


def _sigterm(out: Path) -> tuple[int, str, Path]:
    """Starts a 2-process launch, sends SIGTERM to the launcher only (not its process group) once both workers
    wait for it; returns the launcher's status and output."""
    proc = subprocess.Popen([*MODULE, "launch", "--num_processes", "2", "--cpu", str(WORKER), str(out), "signal"],
                            env=base_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not all((out / f"ready_{r}").exists() for r in range(2)):
            assert proc.poll() is None and time.monotonic() < deadline, "workers never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output, out


def _one_process(out: Path) -> tuple[int, int, str, Path]:
    proc = subprocess.Popen([*MODULE, "launch", "--mixed_precision", "fp16", "--gradient_accumulation_steps", "3",
                             str(WORKER), str(out), "settings"], env=base_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, proc.pid, output, out


def _failing(out: Path) -> subprocess.CompletedProcess:
    script = out / "fail.py"
    script.write_text("import os, sys\nsys.exit(7 if os.environ['RANK'] == '1' else 0)\n")
    return _run([*MODULE, "launch", "--num_processes", "2", "--cpu", str(script)])


# Each in the background from the session's start (tests/helpers/launches.py).
session_run("cli_bf16", "test_example_in_two_processes_with_bf16_from_the_launcher")(lambda tmp: _example_bf16())
session_run("cli_settings", "test_every_process_gets_the_settings_through_the_environment")(_settings)
session_run("cli_sigterm", "test_sigterm_to_stoker_launch_reaches_every_worker")(_sigterm)
session_run("cli_one_process", "test_one_process_runs_the_script_in_place_of_the_launcher")(_one_process)
session_run("cli_failing", "test_a_failing_worker_fails_the_launch_with_its_status")(_failing)


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_example_in_two_processes_with_bf16_from_the_launcher(session_launches: Launches) -> None:
    proc = session_launches.result("cli_bf16")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # The example builds its Accelerator with mixed_precision=None (its default): the launcher's bf16 applies;
    # its own gradient_accumulation_steps=2 is an explicit argument.
    assert proc.stdout.count("mixed_precision=bf16 gradient_accumulation_steps=2") == 1, out  # main process only
    assert re.findall(r"optimizer steps so far: (\d+)", proc.stdout) == ["4"], out  # 256/16/2 ranks/2 per window
    assert proc.stdout.count("final loss") == 1, out


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_every_process_gets_the_settings_through_the_environment(session_launches: Launches) -> None:
    proc, out = session_launches.result("cli_settings")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((out / f"rank_{r}.json").read_text()) for r in range(2)]
    for rank, facts in enumerate(ranks):
        assert (facts["rank"], facts["num_processes"], facts["device"]) == (rank, 2, "cpu")
        assert (facts["mixed_precision"], facts["gradient_accumulation_steps"]) == ("bf16", 4)
        assert facts["env"]["ACCELERATE_MIXED_PRECISION"] == facts["env"]["STOKER_MIXED_PRECISION"] == "bf16"
        assert facts["env"]["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "4"
        assert facts["env"]["ACCELERATE_USE_CPU"] == "true" and facts["env"]["OMP_NUM_THREADS"] == "1"
    assert ranks[0]["pid"] != ranks[1]["pid"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_sigterm_to_stoker_launch_reaches_every_worker(session_launches: Launches) -> None:
    returncode, out, tmp_path = session_launches.result("cli_sigterm")
    assert sorted(p.name for p in tmp_path.glob("sigterm_*")) == ["sigterm_0", "sigterm_1"], out
    assert all((tmp_path / f"sigterm_{r}").read_text() == str(int(signal.SIGTERM)) for r in range(2))
    assert returncode == 128 + signal.SIGTERM, out
    assert "stopped by signal 15" in out


@pytest.mark.slow  # two interpreter start-ups with torch (the launcher, then the script in its place)
@pytest.mark.timeout(400)
def test_one_process_runs_the_script_in_place_of_the_launcher(session_launches: Launches) -> None:
    returncode, pid, out, tmp_path = session_launches.result("cli_one_process")
    assert returncode == 0, out
    facts = json.loads((tmp_path / "rank_0.json").read_text())
    assert facts["pid"] == pid  # exec: no launcher process stands between the script and its signals
    assert (facts["num_processes"], facts["mixed_precision"], facts["gradient_accumulation_steps"]) == (1, "fp16", 3)
    assert "WORLD_SIZE" not in facts["env"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_a_failing_worker_fails_the_launch_with_its_status(session_launches: Launches) -> None:
    proc = session_launches.result("cli_failing")
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "the 2-process run failed: rank 1 (exit code 7)" in proc.stderr


def test_a_failed_run_names_the_rank_that_failed_on_its_own_first() -> None:
    """torch's launcher stops the other workers after the first failure; which of them its report lists depends on
    timing. The rank that failed by itself is named first and gives the status; ranks stopped by a signal follow."""
    from types import SimpleNamespace as Failure

    from stoker.accelerator import describe_failures

    assert describe_failures({0: Failure(exitcode=-15), 1: Failure(exitcode=7)}) == (
        "rank 1 (exit code 7), rank 0 (stopped by signal 15)", 7)
    assert describe_failures({1: Failure(exitcode=7)}) == ("rank 1 (exit code 7)", 7)
    assert describe_failures({1: Failure(exitcode=-15), 0: Failure(exitcode=-9)}) == (
        "rank 0 (stopped by signal 9), rank 1 (stopped by signal 15)", 137)
