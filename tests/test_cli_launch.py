"""``stoker launch`` for real: the Accelerator example in 2 gloo processes, the settings reaching every Accelerator,
SIGTERM forwarded to the workers, and one process run without a launcher (the script replaces ``stoker launch``)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env

EXAMPLE = REPO / "examples" / "accelerator_loop.py"
WORKER = REPO / "tests" / "helpers" / "cli_worker.py"
# What the console script runs: `stoker = "stoker.cli:main"` (pyproject [project.scripts]).
CONSOLE_SCRIPT = [sys.executable, "-c", "import sys; from stoker.cli import main; sys.exit(main())"]
MODULE = [sys.executable, "-m", "stoker"]


def _run(cmd: list[str], timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.distributed
@pytest.mark.timeout(170)
def test_example_in_two_processes_with_bf16_from_the_launcher() -> None:
    cmd = [*CONSOLE_SCRIPT, "launch", "--num_processes", "2", "--cpu", "--mixed_precision", "bf16",
           str(EXAMPLE), "--samples", "256", "--batch-size", "16", "--epochs", "1"]
    proc = _run(cmd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # The example builds its Accelerator with mixed_precision=None (its default): the launcher's bf16 applies;
    # its own gradient_accumulation_steps=2 is an explicit argument.
    assert proc.stdout.count("mixed_precision=bf16 gradient_accumulation_steps=2") == 1, out  # main process only
    assert re.findall(r"optimizer steps so far: (\d+)", proc.stdout) == ["4"], out  # 256/16/2 ranks/2 per window
    assert proc.stdout.count("final loss") == 1, out


@pytest.mark.distributed
@pytest.mark.timeout(170)
def test_every_process_gets_the_settings_through_the_environment(tmp_path: Path) -> None:
    cmd = [*MODULE, "launch", "--num_processes=2", "--cpu", "--mixed_precision=bf16",
           "--gradient_accumulation_steps=4", "--num_cpu_threads_per_process=1", str(WORKER), str(tmp_path),
           "settings"]
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    for rank, facts in enumerate(ranks):
        assert (facts["rank"], facts["num_processes"], facts["device"]) == (rank, 2, "cpu")
        assert (facts["mixed_precision"], facts["gradient_accumulation_steps"]) == ("bf16", 4)
        assert facts["env"]["ACCELERATE_MIXED_PRECISION"] == facts["env"]["STOKER_MIXED_PRECISION"] == "bf16"
        assert facts["env"]["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "4"
        assert facts["env"]["ACCELERATE_USE_CPU"] == "true" and facts["env"]["OMP_NUM_THREADS"] == "1"
    assert ranks[0]["pid"] != ranks[1]["pid"]


@pytest.mark.distributed
@pytest.mark.timeout(170)
def test_sigterm_to_stoker_launch_reaches_every_worker(tmp_path: Path) -> None:
    cmd = [*MODULE, "launch", "--num_processes", "2", "--cpu", str(WORKER), str(tmp_path), "signal"]
    proc = subprocess.Popen(cmd, env=base_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready_{r}").exists() for r in range(2)):
            assert proc.poll() is None and time.monotonic() < deadline, "workers never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # to the launcher only, not its process group
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(p.name for p in tmp_path.glob("sigterm_*")) == ["sigterm_0", "sigterm_1"], out
    assert all((tmp_path / f"sigterm_{r}").read_text() == str(int(signal.SIGTERM)) for r in range(2))
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "stopped by signal 15" in out


@pytest.mark.slow  # two interpreter start-ups with torch (the launcher, then the script in its place)
@pytest.mark.timeout(170)
def test_one_process_runs_the_script_in_place_of_the_launcher(tmp_path: Path) -> None:
    proc = subprocess.Popen([*MODULE, "launch", "--mixed_precision", "fp16", "--gradient_accumulation_steps", "3",
                             str(WORKER), str(tmp_path), "settings"], env=base_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    facts = json.loads((tmp_path / "rank_0.json").read_text())
    assert facts["pid"] == proc.pid  # exec: no launcher process stands between the script and its signals
    assert (facts["num_processes"], facts["mixed_precision"], facts["gradient_accumulation_steps"]) == (1, "fp16", 3)
    assert "WORLD_SIZE" not in facts["env"]


@pytest.mark.distributed
@pytest.mark.timeout(170)
def test_a_failing_worker_fails_the_launch_with_its_status(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(7 if os.environ['RANK'] == '1' else 0)\n")
    proc = _run([*MODULE, "launch", "--num_processes", "2", "--cpu", str(script)], timeout=120)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "the 2-process run failed: rank 1 (exit code 7)" in proc.stderr
