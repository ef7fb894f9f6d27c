"""Issue 16: every 2-process run must exit with status 0, never with SIGABRT ("terminate called without an active
exception") at interpreter exit. Stress test, deselected by default: ``python -m pytest -m stress
tests/distributed/test_clean_exit.py`` (``STOKER_STRESS_RUNS``, default 50 runs; ``STOKER_STRESS_LOAD=1`` adds a
CPU-burning process beside them).

Cases (``tests/helpers/exit_worker.py``): an Accelerator DDP loop with gradient-sync checks, the same loop with a
stateful loader and ``save_state`` every 3 steps, each ending with ``destroy_process_group()``,
``end_training()``, both or neither; a collective still in flight at exit; and ``Trainer(devices=2)``.

Record (shared machine, 2 cores, load average 6-13 from other test runs, December 2026): on the code before this
test, 7 + 3 + 3 runs of these cases (ddp/stateful x 4 endings, inflight x 3 endings) showed no abort; the
abort reported in issue 16 (4 times in a day of example runs, 0 of 25 in a quiet loop) was not reproduced here,
so no run count to the first abort can be given; this test with ``STOKER_STRESS_RUNS=10``: 0 of 10 runs failed
(287 s). No fix is claimed yet: the cause is not proven. What is alive at exit, measured by the worker's last exit
handler (``exit-worker threads: ...``): gloo's threads (2 workers and the transport loop, plus the TCPStore
server on rank 0) in every ending, also after ``destroy_process_group()``, because constructing a
``DistributedDataParallel`` leaves about 10 references to the group's Python object that neither
``destroy_process_group()`` nor deleting the wrapper releases (torch 2.13), so the group is never destroyed
before the process exits.
Narrowed further (torch 2.13, gloo, 2 processes under torchrun): the ~10 extra references are taken once, by the
first ``DistributedDataParallel`` constructed in the process (later wrappers add none), outside DDP's shape check,
its parameter broadcast and its ``reducer`` attribute; gc cannot see their holders (only the script's own globals
are referrers). Without DDP, dropping the last reference after ``destroy_process_group()`` destroys the group and
joins gloo's threads (4 -> 1). In a bare script, importing ``torch._dynamo`` before ``init_process_group`` made the
first DDP take none (4 -> 1 at exit), but in stoker's path (Accelerator, prepare) the 10 references were still taken,
and ``torch._dynamo.trace_rules.clear_lru_cache()`` did not release them; the holder is still unidentified.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env, free_port

WORKER = REPO / "tests" / "helpers" / "exit_worker.py"
ENDINGS = ("destroy", "end", "both", "neither")
CASES = [(c, e) for c in ("ddp", "stateful") for e in ENDINGS] + [("inflight", "destroy"), ("trainer", "neither")]


def _run(case: str, ending: str, out: Path, timeout: float = 240) -> list[tuple[int, str]]:
    """One 2-process run of ``case``; the return code and output of every process (launcher for the Trainer)."""
    out.mkdir(parents=True)
    command = [sys.executable, str(WORKER), str(out), case, ending]
    if case == "trainer":  # Trainer(devices=2) starts its own two workers
        procs = [subprocess.Popen(command, env=base_env(), cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)]
    else:
        port, procs = free_port(), []
        for rank in range(2):
            env = base_env(dict(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
            procs.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    results = []
    for proc in procs:
        try:
            output = proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0] + f"\n[killed after {timeout} s]"
        results.append((proc.returncode, output))
    return results


@pytest.mark.stress
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_two_process_runs_always_exit_cleanly(tmp_path: Path) -> None:
    runs = int(os.environ.get("STOKER_STRESS_RUNS", "50"))
    load = None
    if os.environ.get("STOKER_STRESS_LOAD") == "1":
        load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    failures, started = [], time.monotonic()
    try:
        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(_run, *CASES[i % len(CASES)], tmp_path / f"run{i}") for i in range(runs)]
            for i, job in enumerate(jobs):
                codes = job.result()
                if any(code != 0 or "terminate called" in output for code, output in codes):
                    failures.append((i, CASES[i % len(CASES)], [(c, o[-1500:]) for c, o in codes]))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    summary = f"{len(failures)} of {runs} runs failed in {time.monotonic() - started:.0f} s"
    print(summary)
    assert not failures, summary + "\n" + "\n".join(
        f"run {i} {case}: exit codes {[c for c, _ in codes]}\n" + "\n".join(o for _, o in codes)
        for i, case, codes in failures[:3])
