"""benchmarks/gpu_check.py runs on CPU at its smallest size: every row either measures or says why it is skipped,
one failing row does not lose the others, and the time budget and per-row limit hold."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # puts benchmarks/ on sys.path for gpu_check_rows
    return module


def test_tiny_run_on_cpu_measures_every_cpu_row(gpu_check: ModuleType, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "check.json"
    gpu_check.main(["--tiny", "--cpu", "--out", str(out)])
    report = json.loads(out.read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == [r[0] for r in gpu_check.all_rows()]
    assert {r["section"] for r in rows.values()} == set("abcde")
    cuda_only = {"speed-mlp-compile", "speed-transformer-compile", "memory-transformer-bf16"}
    for name, row in rows.items():
        expected = "skipped" if name in cuda_only else "ok"
        assert row["status"] == expected, (name, row.get("error"), row.get("traceback"))
    assert all(rows[n]["reason"] for n in cuda_only)
    for precision in ("fp32", "bf16", "fp16"):
        parity = rows[f"parity-{precision}"]
        assert parity["verdict"] == "pass" and parity["accelerator_max_diff"] == 0, parity
        assert rows[f"sync-accelerator-{precision}"]["syncs_per_step"] == (1 if precision == "fp16" else 0)
        # the Trainer: the same per step, plus its one non-finite check at the epoch's end
        trainer = rows[f"sync-trainer-{precision}"]
        assert trainer["syncs"] == trainer["steps"] * (1 if precision == "fp16" else 0) + 1, trainer
    assert all(r["verdict"] == "pass" for n, r in rows.items() if n.startswith("sync-")), rows
    assert rows["dist-ddp-1proc"]["backend"] == "gloo" and rows["dist-ddp-1proc"]["verdict"] == "pass"
    assert rows["dist-fsdp2-1proc"]["verdict"] == "pass"
    for name in ("speed-mlp-eager", "speed-transformer-eager"):
        assert rows[name]["ratio"] > 0 and rows[name]["aa_ratio"] > 0 and rows[name]["bound"], rows[name]
    assert report["environment"]["device"] == "cpu" and report["environment"]["tiny"] is True
    table = capsys.readouterr().out
    assert all(name in table for name in rows)


def test_a_failing_row_is_recorded_and_the_next_row_still_runs(gpu_check: ModuleType, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(setup: object, precision: str) -> dict:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_check.rows, "parity", broken)
    report = gpu_check.main(["--tiny", "--cpu", "--only", "parity-fp32,sync-accelerator-fp32",
                             "--out", str(tmp_path / "c.json")])
    first, second = report["rows"]
    assert first["status"] == "error" and "illegal memory access" in first["error"] and first["traceback"]
    assert second["status"] == "ok" and second["verdict"] == "pass"
    assert json.loads((tmp_path / "c.json").read_text())["rows"][0]["status"] == "error"  # written as it goes


def test_time_budget_and_row_limit(gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = gpu_check.main(["--tiny", "--cpu", "--budget", "0", "--only", "parity", "--out", str(tmp_path / "a")])
    assert [r["status"] for r in report["rows"]] == ["skipped"] * 3
    assert all(r["reason"].startswith("time budget") for r in report["rows"])

    def hangs_in_fp32(setup: object, precision: str) -> dict:
        if precision == "fp32":
            time.sleep(30)
        return {"verdict": "pass"}

    monkeypatch.setattr(gpu_check.rows, "parity", hangs_in_fp32)
    start = time.perf_counter()
    report = gpu_check.main(["--tiny", "--cpu", "--row-limit", "0.5", "--only", "parity-fp32,parity-bf16",
                             "--out", str(tmp_path / "b")])
    assert time.perf_counter() - start < 20
    assert report["rows"][0]["status"] == "error" and "RowTimeout" in report["rows"][0]["error"]
    assert report["rows"][1]["status"] == "ok"


def test_cuda_sync_probe_counts_only_sync_warnings_inside_its_region(gpu_check: ModuleType) -> None:
    # The CUDA path of the sync rows, run here with the mode switch recorded instead of applied.
    modes: list[str] = []
    probe = gpu_check.rows.CudaSyncProbe(set_mode=modes.append)
    with pytest.warns(UserWarning):
        warnings.warn("called a synchronizing CUDA operation", UserWarning)  # before start: not counted
    probe.start()
    for _ in range(2):  # "always": repeated warnings from one line all count
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
    warnings.warn("an unrelated warning", UserWarning)
    # torch's notice on the first set_sync_debug_mode call of a process: not a sync (counted once on an H200)
    warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
                  "operations", UserWarning)
    probe.stop()
    with pytest.warns(UserWarning):
        warnings.warn("called a synchronizing CUDA operation", UserWarning)  # after stop: not counted
    assert modes == ["warn", "default"] and probe.count == 2 and not probe.active
    assert "synchronizing" in probe.sites[0]
    assert "gpu_check_rows" in sys.modules
