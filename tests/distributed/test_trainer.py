"""The Trainer across two processes: ``Trainer(devices=2)`` from a plain ``python`` run, ``sync_dist`` and
torchmetrics, main-process-only writing, SIGTERM on one rank (all stop at the same step, one checkpoint) and an
exact resume, a rank that dies, and FSDP through the Trainer.

The worker is ``tests/helpers/dist_trainer_worker.py``; each run writes what every rank saw as JSON. The independent
launches (the full/preempted/resumed sequence, the FSDP run, the dying rank) run in the background from the session's
start (``tests/helpers/launches.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launches import Launches, session_run
from tests.helpers.dist_spawn import HELPERS, REPO, base_env, run_workers
from tests.helpers.forkserver import run_python

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]
WORKER = HELPERS / "dist_trainer_worker.py"


def _read(out: Path, mode: str) -> list[dict]:
    return [json.loads((out / f"rank{r}-{mode}.json").read_text()) for r in range(2)]


def _full_sigterm_resume(out: Path) -> tuple[Path, str, dict[str, list[dict]], list]:
    """The uninterrupted run, then a preempted run and its resume (in that order: the resume reads its checkpoint)."""
    # No RANK/WORLD_SIZE in the environment: Trainer(devices=2) starts the two processes itself.
    full = run_python([str(WORKER), str(out), "full"], env=base_env(), cwd=REPO, timeout=300)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    preempted = run_workers(WORKER, [out, "sigterm"], timeout=240, check=False)
    assert [r.returncode for r in preempted] == [143, 143], "\n".join(r.output[-2000:] for r in preempted)
    last = out / "run_preempted" / "stoker_logs" / "version_0" / "checkpoints"  # the run's checkpoints folder
    (out / "after_sigterm.json").write_text(json.dumps({
        "folders": sorted(p.name for p in last.iterdir()),
        "state": json.loads((last / "last.ckpt" / "stoker_state.json").read_text())}))
    run_workers(WORKER, [out, "resume"], timeout=240)
    return out, full.stdout + full.stderr, {m: _read(out, m) for m in ("full", "sigterm", "resume")}, preempted


def _fsdp(out: Path) -> tuple[Path, list[dict]]:
    run_workers(WORKER, [out, "fsdp"], timeout=240)
    return out, _read(out, "fsdp")


def _die(out: Path) -> list:
    return run_workers(WORKER, [out, "die"], timeout=240, check=False)  # a hang would fail by timeout


# The three independent runs, in the background from the session's start (tests/helpers/launches.py).
session_run("trainer_runs", "test_devices_2_from_a_plain_python_process_runs_ddp",
            "test_sync_dist_and_torchmetrics_agree_across_processes",
            "test_only_the_main_process_writes_logs_and_checkpoint_folders",
            "test_sigterm_on_one_rank_stops_all_ranks_at_the_same_step_with_one_checkpoint",
            "test_killed_and_resumed_two_process_fit_equals_the_uninterrupted_run",
            "test_fsdp_through_the_trainer_matches_ddp")(_full_sigterm_resume)
session_run("trainer_fsdp", "test_fsdp_through_the_trainer_matches_ddp")(_fsdp)
session_run("trainer_die", "test_a_rank_that_dies_makes_the_other_exit_with_an_error")(_die)


@pytest.fixture
def runs(session_launches: Launches) -> tuple[Path, str, dict[str, list[dict]], list]:
    return session_launches.result("trainer_runs")


def test_devices_2_from_a_plain_python_process_runs_ddp(runs: tuple) -> None:
    _, _, results, _ = runs
    full = results["full"]
    assert [(r["rank"], r["world"], r["strategy"]) for r in full] == [(0, 2, "MULTI_CPU"), (1, 2, "MULTI_CPU")]
    assert full[0]["pid"] != full[1]["pid"]
    assert [r["global_step"] for r in full] == [6, 6]  # 48 samples, batch 4, 2 processes, accumulate 2, 2 epochs
    assert full[0]["weights"] == full[1]["weights"]
    assert full[0]["lr"] == 0.01  # StepLR stepped once per optimizer step (6 steps, step_size 2: 0.02 -> 0.01)
    for r in full:  # module.all_gather: one row per process, the same on both
        assert r["gathered"] == {"rank": [0, 1], "row": [[0.0, 0.0], [1.0, 10.0]]}
    # sync_grads: rank r's tensor is row r of the result, weighted 1 (row 0) or 3 (row 1) on both processes: 2 or 6
    assert [r["gather_grad"] for r in full] == [[2.0], [6.0]]


def test_sync_dist_and_torchmetrics_agree_across_processes(runs: tuple) -> None:
    full = runs[2]["full"]
    assert [r["rank_local"] for r in full] == [0.0, 1.0]
    assert [r["rank_synced"] for r in full] == [0.5, 0.5]
    assert full[0]["train/loss_epoch"] == full[1]["train/loss_epoch"]
    for r in full:  # the Metric is computed over the whole validation set (both shards), on both processes
        assert r["val/mse"] == pytest.approx(r["val_mse_full"], rel=1e-6)
        assert r["validate"] == pytest.approx(r["val_mse_full"], rel=1e-6)


def test_only_the_main_process_writes_logs_and_checkpoint_folders(runs: tuple) -> None:
    out = runs[0]
    root = out / "run_full"
    assert sorted(p.name for p in (root / "stoker_logs").iterdir()) == ["version_0"]
    assert [r["log_dir"] for r in runs[2]["full"]] == [str(root / "stoker_logs" / "version_0")] * 2
    rows = (root / "stoker_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) > 6  # a second writer would have made version_1
    checkpoints = root / "stoker_logs" / "version_0" / "checkpoints"  # the run's checkpoints live under its version
    assert sorted(p.name for p in checkpoints.iterdir()) == ["epoch=1-step=6.ckpt"]
    # The loggers hear of each save on the main process only (Lightning's rule; an uploading logger relies on it).
    assert [r["saves_heard"] for r in runs[2]["full"]] == [2, 0]
    # A script's own logger.experiment calls write on the main process only (Lightning's rule).
    assert [r["experiment"] for r in runs[2]["full"]] == ["ExperimentWriter", "DummyExperiment"]
    files = sorted(p.name for p in (checkpoints / "epoch=1-step=6.ckpt").iterdir())
    assert {"random_states_0.safetensors", "random_states_1.safetensors"} <= set(files)
    for stem in ("dataloader", "custom_checkpoint"):  # every process saved its own loader and Trainer state
        assert any(f.startswith(stem) and "process1" in f for f in files), files
        assert any(f.startswith(stem) and "process" not in f for f in files), files


def test_sigterm_on_one_rank_stops_all_ranks_at_the_same_step_with_one_checkpoint(runs: tuple) -> None:
    out, _, results, preempted = runs
    # Rank 1 got SIGTERM after step 4; the processes agree without blocking each step, so one step later: both
    # finish step 5, save it once and exit.
    assert [r["stopped_at"] for r in results["sigterm"]] == [5, 5]
    assert [r["exit"] for r in results["sigterm"]] == [143, 143]
    assert "".join(r.output for r in preempted).count("preempted by SIGTERM at step 5") == 1
    saved = json.loads((out / "after_sigterm.json").read_text())
    assert saved["state"]["counters"]["step"] == 5
    # the end of epoch 0, then the preemption's one save
    assert saved["folders"] == ["epoch=0-step=3.ckpt", "last.ckpt"]


def test_killed_and_resumed_two_process_fit_equals_the_uninterrupted_run(runs: tuple) -> None:
    results = runs[2]
    folder = str(runs[0] / "run_preempted" / "stoker_logs" / "version_0")  # both processes continue its version
    assert [r["log_dir"] for r in results["resume"]] == [folder] * 2
    for full, resumed in zip(results["full"], results["resume"]):
        assert resumed["global_step"] == 6
        assert resumed["weights"] == full["weights"]  # bit-identical
        for key in ("rank_synced", "rank_local", "train/loss_epoch", "val/mse", "lr"):
            assert resumed[key] == full[key], key


def test_a_rank_that_dies_makes_the_other_exit_with_an_error(session_launches: Launches) -> None:
    ranks = session_launches.result("trainer_die")
    assert ranks[1].returncode == 3
    assert ranks[0].returncode not in (0, None)
    assert "peer" in ranks[0].output.lower() or "connection" in ranks[0].output.lower(), ranks[0].output[-2000:]


def test_fsdp_through_the_trainer_matches_ddp(runs: tuple, session_launches: Launches) -> None:
    out, fsdp = session_launches.result("trainer_fsdp")
    full = runs[2]["full"]
    assert [r["strategy"] for r in fsdp] == ["FSDP"] * 2
    assert max(abs(a - b) for a, b in zip(fsdp[0]["weights"], full[0]["weights"])) < 1e-5
    assert fsdp[0]["val/mse"] == pytest.approx(full[0]["val/mse"], rel=1e-5)
    for r in fsdp:  # validate(ckpt_path="last") reads the weights from the DCP shards
        assert r["validate_ckpt"] == pytest.approx(r["validate"], rel=1e-6)
        assert r["validate_fresh"] == pytest.approx(r["validate"], rel=1e-6)
    last = out / "run_fsdp" / "stoker_logs" / "version_0" / "checkpoints" / "epoch=1-step=6.ckpt"  # the default's
    assert (last / ".metadata").exists() and (last / "__1_0.distcp").exists()
