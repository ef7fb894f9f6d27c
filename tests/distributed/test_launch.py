"""Launching: the Accelerator example under ``torchrun --nproc_per_node=2``, the char-LM Trainer example on two
"nodes" (two torchrun agents, one process each, c10d rendezvous on 127.0.0.1), and device counts for
``Trainer(devices=N)``. The two launches run in the background from the session's
start (``tests/helpers/launches.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stoker.accelerator.distributed.launch import ensure_processes, resolve_num_processes
from tests.helpers.launches import Launches, session_run
from tests.helpers.dist_spawn import REPO, base_env, collect, free_port

EXAMPLE = REPO / "examples" / "accelerator_loop.py"
CHAR_LM = REPO / "examples" / "char_lm.py"
TINY = ["--samples", "256", "--batch-size", "16", "--cpu"]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _example_under_torchrun() -> subprocess.CompletedProcess:
    cmd = _torchrun("--standalone", "--nproc_per_node=2", str(EXAMPLE), *TINY, "--epochs", "3")
    return subprocess.run(cmd, env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=300)


def _char_lm_on_two_nodes(root: Path) -> tuple[Path, list]:
    # examples/char_lm.py (a Trainer script) unchanged: two torchrun agents, one process each, meet on 127.0.0.1.
    port, run_id = free_port(), uuid.uuid4().hex[:8]
    procs = []
    for node_rank in range(2):
        cmd = _torchrun("--nnodes=2", "--nproc_per_node=1", f"--node_rank={node_rank}", "--rdzv-backend=c10d",
                        f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}", "--max-restarts=0",
                        str(CHAR_LM), "--tiny", "--root", str(root))
        procs.append(subprocess.Popen(cmd, env=base_env(), cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    return root, collect(procs, timeout=300)


TORCHRUN_TEST = "test_example_runs_unchanged_under_torchrun_nproc_per_node_2"
NODES_TEST = "test_char_lm_on_two_nodes_on_one_machine_with_c10d_rendezvous"


# Both in the background from the session's start (tests/helpers/launches.py).
session_run("torchrun_example", TORCHRUN_TEST)(lambda tmp: _example_under_torchrun())
session_run("char_lm_two_nodes", NODES_TEST)(_char_lm_on_two_nodes)


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_example_runs_unchanged_under_torchrun_nproc_per_node_2(session_launches: Launches) -> None:
    proc = session_launches.result("torchrun_example")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # accelerator.print: the main process only. 256 samples in batches of 16 over 2 processes, windows of 2:
    # 4 optimizer steps per epoch (half of one process's 8), and OneCycleLR (sized for one process) fits exactly.
    assert proc.stdout.count("final loss") == 1, proc.stdout
    steps = [int(s) for s in re.findall(r"optimizer steps so far: (\d+)", proc.stdout)]
    assert steps == [4, 8, 12], proc.stdout
    losses = [float(v) for v in re.findall(r"epoch \d+: loss (\S+)", proc.stdout)]
    assert losses[-1] < losses[0]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_char_lm_on_two_nodes_on_one_machine_with_c10d_rendezvous(session_launches: Launches) -> None:
    root, results = session_launches.result("char_lm_two_nodes")
    out = "".join(r.output for r in results)
    # Each node's process prints its summary; both trained the same 6 steps and agree on the synced perplexity.
    assert out.count("6 optimizer steps") == 2, out
    ppl = re.findall(r"validation perplexity (\S+)", out)
    assert len(ppl) == 2 and ppl[0] == ppl[1], out
    assert sorted(p.name for p in (root / "stoker_logs").iterdir()) == ["version_0"]  # one writer
    last = root / "stoker_logs" / "version_0" / "checkpoints" / "last.ckpt"  # the run's folder, beside its logs
    assert (last / "random_states_1.safetensors").exists()


def test_resolve_num_processes() -> None:
    assert resolve_num_processes(2, "cpu") == 2
    assert resolve_num_processes("3", "cpu") == 3
    assert resolve_num_processes([0, 1], "gpu") == 2
    assert resolve_num_processes("auto", "cpu") == 1
    for bad in (0, -2, "many", 1.5, True, []):
        with pytest.raises(ValueError, match="devices="):
            resolve_num_processes(bad, "cpu")


def test_more_devices_than_gpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"devices=4\) asks for 4 GPUs but 2 are visible"):
        resolve_num_processes(4, "gpu")
    assert resolve_num_processes(4, "cpu") == 4


def test_under_a_launcher_the_process_count_must_match(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    ensure_processes(2)  # returns: this process is one of the launcher's
    assert resolve_num_processes("auto", "cpu") == 2  # devices="auto" adopts the launcher's processes
    with pytest.raises(ValueError, match=r"devices=4.*LOCAL_WORLD_SIZE=2"):
        ensure_processes(4)


def test_one_process_needs_no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    ensure_processes(1)  # returns at once


def test_launching_from_inside_pytest_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    import __main__
    from importlib.machinery import ModuleSpec

    monkeypatch.setattr(__main__, "__spec__", ModuleSpec("pytest.__main__", None), raising=False)
    with pytest.raises(RuntimeError, match="whole test session would run"):
        ensure_processes(2)
