"""Issue 16: every 2-process run must exit with status 0, never with SIGABRT ("terminate called without an active
exception") at interpreter exit. Stress test, deselected by default: ``python -m pytest -m stress
tests/distributed/test_clean_exit.py`` (``STOKER_STRESS_RUNS``, default 50; ``STOKER_STRESS_SECONDS`` stops
starting runs after that long; ``STOKER_STRESS_CASES="ddp:neither,trainer:both"`` picks cases;
``STOKER_STRESS_LOAD=1`` adds a CPU-burning process). Each run also checks the thread proxy below.

Cases (``tests/helpers/exit_worker.py``): an Accelerator DDP loop with gradient-sync checks, the same loop with a
stateful loader and ``save_state`` every 3 steps (background deletions from rotation alive at exit), each ending
with ``destroy_process_group()``, ``end_training()``, both or neither; a collective still in flight at exit;
``Trainer(devices=2)`` ending with nothing or with ``end_training()`` + ``destroy_process_group()``; Accelerate's
``multi_process_metrics.py`` and its checkpointing example (``complete_nlp_example.py --checkpointing_steps 3
--use_stateful_dataloader``, tests/compat's copies, run as scripts); FSDP2 on gloo; ``second``: the DDP loop, then a
second Accelerator that joins the group and trains a DDP model left as garbage in a reference cycle; ``own-group``:
the script creates the group itself, runs the DDP loop (its wrapper a global) and destroys the group.

Cause (torch 2.13, gloo): a process group whose Python object is still referenced when the interpreter finalizes
keeps gloo's C++ threads (``pt_gloo_runloop`` x2, ``gloo_tcp_loop``, and ``pt_tcpstore_uv`` on rank 0) running
into finalization, where destroying them can abort. ``destroy_process_group()`` does not stop them while a
reference remains. References found, each fixed so that by the last exit handler the threads are joined:
importing ``torch._dynamo`` after the group exists (+10 references, invisible to gc; DDP imports it: the DDP
strategy imports it first), stoker's own exit handler arguments and the strategy's group, DDP wrappers'
``reducer``/``logger``/``process_group``, the Trainer's preemption agreement (``SignalAgreement`` kept
``dist.group.WORLD``: gloo threads alive in both Trainer workers, also after ``destroy``; now weak references),
and FSDP2's mesh infos and ``DeviceMesh._pg_registry`` (threads alive after ``end_training``; now cleared at
release). With several Accelerators in one process (Accelerate's test scripts make several), the wrappers and
meshes of those that did not create the group held it too (gloo's threads alive at exit in every run of the 2-process
surface checks, which aborted once in a full CI run, 4 December 2026): every wrapper and mesh any strategy made is
now released when the group is destroyed. A group the script created and destroyed itself was still held by
stoker's wrappers (no strategy owned it, so none released them): every wrapper and mesh made in the process now
lets go at exit, in an exit handler registered when stoker's DDP module is imported (so it runs after the
script's own). A script that keeps the group itself (``kept``, the control) still leaves the threads alive.

Proxy (``test_gloo_threads_are_gone_before_interpreter_exit``, default suite): the thread count at the worker's
last exit handler equals the count before the group existed, after waiting up to 5 s for threads already ending.
It once failed 2 of 3 cases under a concurrent full run: a joined thread (a Python executor worker such as
``stoker-fsync_0``, or a joined gloo thread) can stay listed in /proc/self/task for a moment after its join
returns, and under load that moment is long; the stress runs below saw such a settling thread at the handler in
a few processes, always gone within the wait. Gloo threads of a live group never end, so the wait cannot hide one
(the control shows it).

Record (shared machine, 2 cores, load average 14-19 from other engineers' tests, every run under ``nice -n 19``,
December 2026), ``STOKER_STRESS_RUNS=1000 STOKER_STRESS_SECONDS=3300 nice -n 19 python -m pytest -s -m stress
tests/distributed/test_clean_exit.py`` over the 13 cases then listed (all above but FSDP), 3-4 runs of each:

- after the fixes (main at this change, Trainer fix included): 42 runs, 78 processes, every exit code 0, 0 aborts,
  0 processes with threads left at the last exit handler; 4 had a joined thread still ending there, gone within
  the wait. 3313 s.
- before (e6e71c1^, the same test and worker, at the same time): 40 runs, 74 processes, every exit code 0, 0
  aborts, but all 80 worker processes left gloo's threads to finalization (5 on rank 0 with the store's, 4 on
  rank 1). 3318 s. With the 13 + 10 runs of the investigation, 0 aborts in about 65 runs before the fix: the
  abort reported in issue 16 (4 times in a day of example runs) was never reproduced here, so no run count to
  the first abort can be given; what the fix is shown to change is the mechanism (threads alive at finalization,
  every run before, none after).
- FSDP2 (added after those runs): 1 run of ``fsdp:neither`` and 1 of ``fsdp:end`` before its fix left the
  threads; after it, ``STOKER_STRESS_CASES="fsdp:end,fsdp:neither" STOKER_STRESS_SECONDS=840``: 50 runs, 100
  processes, every exit code 0, 0 aborts, 0 threads left, 861 s (load had dropped).
  ``test_end_training_leaves_no_reference_to_the_fsdp_group`` fails without the fix.
- Several Accelerators and script-made groups (``second``, ``own-group``; 4 December 2026, quiet machine, main at
  21239aa): ``STOKER_STRESS_RUNS=60 STOKER_STRESS_SECONDS=420`` over all 17 cases: 60 runs, 114 processes, every
  exit code 0, 0 aborts, 0 threads left (6 settled within the wait), 162 s; and
  ``STOKER_STRESS_CASES="second:end,own-group:destroy,ddp:neither,stateful:end" STOKER_STRESS_RUNS=24``: 48
  processes, 0 aborts, 0 left, 62 s. Without the fixes the proxy test fails on ``second:end`` and on
  ``own-group:destroy`` (gloo's threads left), as the 2-process surface checks left them in each of 3 runs.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.dist_spawn import REPO, base_env, free_port
from tests.helpers.launches import Launches, session_run

WORKER = REPO / "tests" / "helpers" / "exit_worker.py"
ENDINGS = ("destroy", "end", "both", "neither")
CASES = ([(c, e) for c in ("ddp", "stateful") for e in ENDINGS]
         + [("inflight", "destroy"), ("trainer", "neither"), ("trainer", "both"), ("example-checkpointing", "neither"),
            ("example-metrics", "neither"), ("fsdp", "end"), ("fsdp", "neither"), ("second", "end"),
            ("own-group", "destroy")])
_THREADS = re.compile(r"exit-worker threads: (\d+) before the group, (\d+) at the last exit handler, (\d+) after")


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


def thread_counts(output: str) -> list[tuple[int, int, int, str]]:
    """Each worker's ``(before the group, at the last exit handler, after the bounded wait, line)`` in ``output``
    (a Trainer launcher's output holds its workers' lines and its own)."""
    return [(*map(int, m.groups()), line) for line in output.splitlines() if (m := _THREADS.match(line))]


def _problems(codes: list[tuple[int, str]], processes: int) -> list[str]:
    """What is wrong with one run: an exit code other than 0, an abort, a thread left to finalization."""
    found = []
    for code, output in codes:
        if code != 0 or "terminate called" in output:
            found.append(f"exit code {code}")
        counts = thread_counts(output)
        found += [f"threads left at exit: {line}" for before, _, after, line in counts if after != before]
    lines = sum(len(thread_counts(output)) for _, output in codes)
    if lines != processes:
        found.append(f"{lines} thread reports for {processes} processes")
    return found


@pytest.mark.stress
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(14400)
def test_two_process_runs_always_exit_cleanly(tmp_path: Path) -> None:
    runs = int(os.environ.get("STOKER_STRESS_RUNS", "50"))
    chosen = os.environ.get("STOKER_STRESS_CASES")  # e.g. "ddp:neither,trainer:neither"; default: all CASES
    cases = [tuple(c.split(":")) for c in chosen.split(",")] if chosen else CASES
    load = None
    if os.environ.get("STOKER_STRESS_LOAD") == "1":
        load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    failures, transient, left, aborts, codes_seen, started = [], 0, 0, 0, {}, time.monotonic()
    deadline = started + float(os.environ.get("STOKER_STRESS_SECONDS", "inf"))  # no new run starts after it

    def one(i: int) -> list[tuple[int, str]] | None:
        return _run(*cases[i % len(cases)], tmp_path / f"run{i}") if time.monotonic() < deadline else None

    try:
        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(one, i) for i in range(runs)]
            for i, job in enumerate(jobs):
                codes = job.result()
                if codes is None:
                    runs = i
                    break
                print(f"run {i} {':'.join(cases[i % len(cases)])}: exit codes {[c for c, _ in codes]}, threads "
                      f"{[t[:3] for _, o in codes for t in thread_counts(o)]} at {time.monotonic() - started:.0f} s",
                      flush=True)
                for code, output in codes:
                    codes_seen[code] = codes_seen.get(code, 0) + 1
                    transient += sum(at > before == after for before, at, after, _ in thread_counts(output))
                    left += sum(after != before for before, _, after, _ in thread_counts(output))
                    aborts += code == -6 or "terminate called" in output
                processes = 3 if cases[i % len(cases)][0] == "trainer" else 2
                if problems := _problems(codes, processes):
                    failures.append((i, cases[i % len(cases)], problems, [o[-1500:] for _, o in codes]))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    summary = (f"{len(failures)} of {runs} runs failed in {time.monotonic() - started:.0f} s over {len(cases)} cases; "
               f"exit codes (per process) {codes_seen}; {aborts} aborts; {left} processes left threads to "
               f"finalization; {transient} had a thread still ending at the last exit handler (settled)")
    print("failed runs:", [(i, case) for i, case, _, _ in failures])
    print(summary)
    assert not failures, summary + "\n" + "\n".join(
        f"run {i} {case}: {problems}\n" + "\n".join(outputs) for i, case, problems, outputs in failures[:3])


PROXY_CASES = [("stateful", "end"), ("trainer", "neither"), ("second", "end"), ("own-group", "destroy"),
               ("kept", "neither")]
PROXY_TEST = "test_gloo_threads_are_gone_before_interpreter_exit"
# Each case's two processes are a background run of the session (tests/helpers/launches.py).
for _case, _ending in PROXY_CASES:
    session_run(f"clean_exit_{_case}_{_ending}", f"{PROXY_TEST}[{_case}-{_ending}]", module=__name__)(
        functools.partial(lambda tmp, case, ending: _run(case, ending, tmp / "run", timeout=180),
                          case=_case, ending=_ending))


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("case,ending", PROXY_CASES)
def test_gloo_threads_are_gone_before_interpreter_exit(session_launches: Launches, case: str, ending: str) -> None:
    """The mechanism behind the abort, checked on every run: by the last exit handler the group is destroyed and
    gloo's threads joined, so the thread count returns to what it was before the group existed (within the
    worker's bounded wait for threads already ending). ``kept`` is the control: the script keeps the group in a
    global, so gloo's threads must still be there (this is what the count detects)."""
    codes = session_launches.result(f"clean_exit_{case}_{ending}")
    reports = [report for _, output in codes for report in thread_counts(output)]
    assert len(reports) == (3 if case == "trainer" else 2), [output[-2000:] for _, output in codes]
    if case == "kept":
        assert all(after > before for before, _, after, _ in reports), reports
        assert any("pt_gloo" in line for *_, line in reports), reports
        return
    assert not _problems(codes, len(reports)), [output[-2000:] for _, output in codes]


def test_end_training_leaves_no_reference_to_the_fsdp_group() -> None:
    """FSDP2 in one process (an in-memory store): after ``end_training()`` nothing holds the group stoker created
    (FSDP2 kept it in its mesh infos and in ``DeviceMesh._pg_registry``), so gloo's threads are joined now, not at
    the interpreter's finalization."""
    import torch
    import torch.distributed as dist

    from stoker import Accelerator

    acc = Accelerator(cpu=True, strategy="fsdp")
    group = dist.group.WORLD
    assert group is not None, "strategy='fsdp' in one process created no group"
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    acc.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    acc.end_training()
    assert not dist.is_initialized()
    assert sys.getrefcount(group) == 2, "references left besides `group` and getrefcount's argument"


def test_end_training_releases_the_group_from_every_accelerator_in_the_process() -> None:
    """A second Accelerator that joined the group (it did not create it) prepared an FSDP2 model that is now garbage
    in a reference cycle, not yet collected: ``end_training()`` of the Accelerator that created the group still
    leaves nothing holding it (the second's mesh registry and the model's mesh infos held it; its DDP wrappers'
    reducers would, in several processes)."""
    import torch
    import torch.distributed as dist

    from stoker import Accelerator

    acc = Accelerator(cpu=True, strategy="fsdp")
    group = dist.group.WORLD
    assert group is not None, "strategy='fsdp' in one process created no group"

    def second() -> None:
        other = Accelerator(cpu=True, strategy="fsdp")
        model = torch.nn.Linear(4, 1)
        model.__dict__["_cycle"] = [model]  # freed only by the collector
        prepared = other.prepare(model)
        other.backward(prepared(torch.randn(2, 4)).sum())

    second()
    acc.end_training()
    assert not dist.is_initialized()
    assert sys.getrefcount(group) == 2, "references left besides `group` and getrefcount's argument"


def test_fp16_fsdp_leaves_no_reference_to_the_group() -> None:
    """FSDP2 with fp16 (a ShardedGradScaler) in a fresh process: after ``end_training()`` nothing holds the group.
    torch 2.13's ShardedGradScaler takes ``process_group=dist.group.WORLD`` as a default argument, so importing its
    module after the group exists kept the group in the function's defaults (invisible to gc) for good; the strategy
    that creates the group imports it first, and the FSDP strategy passes the group explicitly."""
    script = """
import sys, torch, torch.distributed as dist
from stoker import Accelerator
acc = Accelerator(cpu=True, strategy="fsdp", mixed_precision="fp16")
group = dist.group.WORLD
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
acc.backward(model(torch.randn(2, 4)).float().sum())
opt.step()
assert type(acc.precision.scaler).__name__ == "QuietShardedGradScaler"
acc.end_training()
print("initialized", dist.is_initialized(), "extra references", sys.getrefcount(group) - 2)
"""
    done = subprocess.run([sys.executable, "-c", script], env=base_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "initialized False extra references 0" in done.stdout, done.stdout[-2000:]
