"""Resume in a new process, bit for bit, and crash safety under kill -9 during save_state."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from stoker import Accelerator, ProjectConfiguration
from stoker.accelerator.checkpointing.atomic import MANIFEST_NAME, list_checkpoints, verify_checkpoint
from tests.helpers import ckpt_worker
from tests.helpers.dist_spawn import base_env
from tests.helpers.launches import Launches, session_run
from tests.helpers.forkserver import ForkedProcess, popen_python

WORKER = Path(ckpt_worker.__file__)


def start(*args: str) -> ForkedProcess:
    return popen_python([str(WORKER), *args], env=base_env(), merge_stderr=True)


def finish(*procs: ForkedProcess) -> None:
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out


@session_run("exact_resume", "test_exact_resume_in_a_new_process")
def _exact_resume_runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The five launches of ``test_exact_resume_in_a_new_process``, a background run of the session
    (``tests/helpers/launches.py``), so that they overlap the in-process tests."""
    full, mid, end = tmp_path / "full", tmp_path / "mid", tmp_path / "end"
    for d in (full, mid, end):
        d.mkdir()
    # Two at a time: the machine has two cores.
    finish(start("train", str(full)), start("train", str(mid), "--stop-at", "7"))
    finish(start("train", str(end), "--stop-at", "10"), start("train", str(mid), "--resume"))
    finish(start("train", str(end), "--resume"))
    return full, mid, end


@pytest.mark.slow
def test_exact_resume_in_a_new_process(session_launches: Launches):
    """Shuffled loader, dropout, AdamW + StepLR, accumulation 2, fp16 scaler on CPU: a run stopped after window 7
    (mid-epoch) or window 10 (the last batch of epoch 2) and resumed in a new process ends bit-identical."""
    full, mid, end = session_launches.result("exact_resume")
    expected = load_file(full / "final.safetensors")
    reference = json.loads((full / "log.json").read_text())
    assert reference["windows"] == 15 and 0 < reference["step"] < 15  # some fp16 steps were skipped, as they should
    for run in (mid, end):
        log = json.loads((run / "log.json").read_text())
        assert log == reference  # same losses window by window: same batches, same dropout, same scale
        got = load_file(run / "final.safetensors")
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=f"{run.name}: {key}")
    assert sorted(os.listdir(mid / "checkpoints")) == ["checkpoint_0"]


def _saver(project_dir: str) -> None:
    ckpt_worker.save_loop(project_dir)


def _async_saver(project_dir: str, width: int = 512) -> None:
    """As ``ckpt_worker.save_loop``, with ``async_save=True``; after each call returns, the live tensors are changed
    (as training would) while the background thread writes: a checkpoint holding any of those values is torn."""
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=3))
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, width))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = ckpt_worker.Progress()
    accelerator.register_for_checkpointing(progress)
    ckpt_worker.fill(model, optimizer, -1.0)
    if list_checkpoints(project_dir):
        accelerator.load_state()
    while True:
        number = accelerator.save_iteration
        ckpt_worker.fill(model, optimizer, float(number))
        progress.windows = number
        accelerator.save_state(async_save=True)
        ckpt_worker.fill(model, optimizer, number + 0.5)
        progress.windows = -1


@pytest.mark.slow
@pytest.mark.parametrize("saver, kills", [(_saver, 20), (_async_saver, 12)], ids=["sync", "async"])
def test_kill_9_during_save_never_leaves_a_broken_checkpoint(tmp_path, saver, kills):
    """A process saving ~6 MB checkpoints in a loop is killed at random moments, 20 times (12 with asynchronous
    saves). After every kill the newest complete checkpoint loads and is internally consistent, and every folder
    that looks complete is. Leftovers (temporary folders, trash of interrupted deletions) are hidden, and the next
    save cleans them up."""
    project = str(tmp_path)
    # Forked children start in milliseconds with torch loaded (a fresh interpreter takes seconds); they run
    # torch single-threaded, so the parent's OpenMP pool is never used after the fork.
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(0)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=project, automatic_checkpoint_naming=True, total_limit=3))
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = ckpt_worker.Progress()
    accelerator.register_for_checkpointing(progress)
    ckpt_worker.fill(model, optimizer, -1.0)
    newest_numbers, interrupted = [], 0
    for kill in range(kills):
        proc = ctx.Process(target=saver, args=(project,))
        proc.start()
        if kill:
            time.sleep(rng.uniform(0.1, 0.4))
        else:  # the first run needs time to write something (seconds on a busy machine): its first checkpoint
            deadline = time.monotonic() + 60
            while not list_checkpoints(project) and time.monotonic() < deadline:
                time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        complete = list_checkpoints(project)
        assert complete, "no checkpoint completed"
        for path in complete:  # nothing incomplete passes for complete
            verify_checkpoint(path)
        root = Path(project, "checkpoints")
        for entry in root.iterdir():  # leftovers are hidden temporaries, never a folder named like a checkpoint
            assert entry.name.startswith(".") or (entry / MANIFEST_NAME).exists(), entry
            interrupted += entry.name.endswith(".stoker-tmp")
        assert len(complete) <= 4  # total_limit=3, plus one if killed between commit and rotation
        accelerator.load_state()
        number = int(Path(complete[-1]).name.split("_")[1])
        assert progress.windows == number and accelerator.save_iteration == number + 1
        for p in model.parameters():  # every file of the loaded checkpoint came from the same save
            assert torch.all(p == number)
            assert all(torch.all(t == number) for t in optimizer.state[p].values() if t.dim() > 0)
        newest_numbers.append(number)
    assert newest_numbers == sorted(newest_numbers) and newest_numbers[-1] >= kills // 2  # saves kept completing
    assert interrupted >= kills // 4  # the kills really landed in the middle of saves
    accelerator.save_state()  # cleans what the kills left behind
    accelerator.end_training()
    assert not [e.name for e in Path(project, "checkpoints").iterdir() if e.name.startswith(".")]
