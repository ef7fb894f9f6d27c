"""benchmarks/overhead.py, step_calls.py and checkpoint_cpu.py: the measurement itself (no timing is asserted, only
what is measured)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent.parent / "benchmarks"


@pytest.fixture()
def overhead() -> Iterator[object]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("overhead")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_rounds_give_every_runner_one_epoch_in_blocks_never_twice_in_a_row(overhead: object) -> None:
    log: list[tuple[str, int]] = []

    def recorder(name: str) -> Callable[[object], Callable[[int], None]]:
        return lambda w: (lambda n: log.append((name, n)))

    names = ["a", "b", "c", "d"]
    saved = dict(overhead.RUNNERS)
    try:
        for name in names:
            overhead.RUNNERS[name] = recorder(name)
        w = overhead.Workload("t", (2, 2), batch_size=2, steps=12, reps=5, warmup=1)
        results = overhead.measure(w, names, block=3, build_seed=7)
    finally:
        overhead.RUNNERS.clear()
        overhead.RUNNERS.update(saved)
    warmup, timed = log[:len(names)], log[len(names):]
    assert sorted(warmup) == [(n, 12) for n in names]  # one whole epoch each
    assert all(n == 3 for _, n in timed) and len(timed) == 5 * 4 * len(names)  # 4 blocks per round
    sequence = [name for name, _ in timed]
    assert all(x != y for x, y in zip(sequence, sequence[1:])), "a runner ran twice in a row"
    for start in range(0, len(sequence), 4 * len(names)):  # each round: every runner 4 blocks = 12 steps
        assert sorted(sequence[start:start + 4 * len(names)]) == sorted(names * 4)
    assert {name: len(r.cpu) for name, r in results.items()} == dict.fromkeys(names, 5)
    with pytest.raises(ValueError, match="must divide"):
        overhead.measure(w, names, block=5)


def test_the_trainer_and_raw_thread_runners_train_the_steps_asked(overhead: object,
                                                                  capsys: pytest.CaptureFixture) -> None:
    overhead.main(["--workloads", "micro", "--runners", "raw,raw-thread,accelerator,trainer-bare", "--reps", "2",
                   "--block", "10", "--threads", "1"])
    out = capsys.readouterr().out
    for name in ("raw-thread", "accelerator", "trainer-bare"):
        assert any(line.split()[:2] == [name, "cpu"] for line in out.splitlines()), out


def test_step_calls_counts_the_trainer_thread(overhead: object) -> None:
    step_calls = importlib.import_module("step_calls")
    raw = sum(step_calls.count_calls("raw", 20).values())
    threaded = sum(step_calls.count_calls("raw-thread", 20).values())
    lean = sum(step_calls.count_calls("raw-lean", 20).values())
    trainer = sum(step_calls.count_calls("trainer-bare", 20).values())
    assert raw > 20 * 50  # torch's own Python calls in each step are counted
    assert abs(threaded - raw) < 20 * 5  # the same loop on the helper thread: counted there, about the same
    assert lean < raw  # the raw loop without torch's profiler ranges (what stoker's loaders and optimizers skip)
    # The Trainer's step does more than that loop's, all of it on its own thread (than raw's too, before the
    # shortcuts: now it makes fewer calls than raw).
    assert trainer > lean


def test_the_component_runners_each_add_their_part(overhead: object, capsys: pytest.CaptureFixture) -> None:
    parts = ["accelerator-thread", "raw-module", "accelerator-module", "trainer-log", "trainer-log-bar",
             "trainer-log-tb", "trainer-ckpt"]
    assert not set(parts) & set(overhead.DEFAULT_RUNNERS)  # asked for by name only
    overhead.main(["--workloads", "micro", "--runners", ",".join(["raw", *parts]), "--reps", "2", "--block", "10",
                   "--threads", "1"])
    out = capsys.readouterr().out
    for name in parts:
        assert any(line.split()[:2] == [name, "cpu"] for line in out.splitlines()), out
    step_calls = importlib.import_module("step_calls")
    calls = {name: sum(step_calls.count_calls(name, 20).values())
             for name in ("raw", "raw-module", "accelerator", "accelerator-thread", "accelerator-module",
                          "trainer-bare", "trainer-log", "trainer-log-bar")}
    assert abs(calls["accelerator-thread"] - calls["accelerator"]) < 20 * 5  # the same loop, on the helper thread
    # The floor rows: the training_step call (and its self.model lookup) and a hook per batch on top of their loops,
    # and the Trainer's own bookkeeping on top of the Accelerator floor.
    assert calls["raw"] < calls["raw-module"] < calls["raw"] + 20 * 10
    assert calls["accelerator"] < calls["accelerator-module"] < calls["trainer-bare"]
    assert calls["trainer-log"] > calls["trainer-bare"] + 20 * 5  # self.log's work, every step
    assert calls["trainer-log-bar"] > calls["trainer-log"] + 20  # the bar's per-batch hook
    saves = step_calls.count_calls("trainer-ckpt", 20)  # 20 counted steps hold one epoch end: one checkpoint
    assert saves["accelerator/checkpointing/checkpoint.py:save_state"] == 1, sorted(k for k in saves if "save" in k)


def test_checkpoint_cpu_compares_fits_with_and_without_checkpoints(overhead: object, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    checkpoint_cpu = importlib.import_module("checkpoint_cpu")
    # Each fit with checkpoints checks that it saved the last epoch's checkpoint and `last` (else it raises).
    checkpoint_cpu.main(["--epochs", "2", "--pairs", "1", "--dir", str(tmp_path)])
    assert "one checkpoint costs" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_the_parts_runners_each_run_their_own_variant(overhead: object, capsys: pytest.CaptureFixture) -> None:
    parts = importlib.import_module("overhead_parts")
    accelerator_parts = ["raw-detach", "raw-calls-50", "raw-calls-50-distinct", "part-loader", "part-accumulate",
                         "part-optimizer", "part-scheduler"]
    trainer_parts = ["trainer-stripped", "trainer-step-fn", "trainer-opt-fn", "trainer-no-watch"]
    parts.EPOCHS_RUN.clear()
    try:
        overhead.main(["--workloads", "micro-300", "--runners", ",".join(["raw", *accelerator_parts, *trainer_parts,
                       "trainer-bare"]), "--reps", "1", "--block", "150", "--threads", "1"])
    finally:
        parts.unpatch()  # the tests after this one run the real FitLoop, not the dispatcher
    from stoker.trainer.loops import FitLoop

    assert not hasattr(FitLoop._run_batches, "_overhead_parts")
    out = capsys.readouterr().out
    for name in [*accelerator_parts, *trainer_parts]:
        assert any(line.split()[:2] == [name, "cpu"] for line in out.splitlines()), out
    # Every Trainer row ran its own loop, every epoch (the warm-up epochs, the timed one, the one it paused in);
    # trainer-bare, in the same process, kept the real loop, as trainer-no-watch did (without the watch).
    assert set(parts.EPOCHS_RUN) == {"real", "trainer-stripped", "trainer-step-fn", "trainer-opt-fn",
                                     "trainer-no-watch"}
    assert parts.EPOCHS_RUN["real"] == parts.EPOCHS_RUN["trainer-stripped"] >= 3
    assert len(set(parts.EPOCHS_RUN.values())) == 1


def test_step_times_groups_the_intervals_of_a_fit(overhead: object) -> None:
    """benchmarks/step_times.py: one fit of the full configuration is timed and grouped (no figure asserted)."""
    step_times = importlib.import_module("step_times")
    figures = step_times.measure("full", epochs=3)
    assert list(figures) == ["middle step", "log", "after-log", "edge", "after-edge", "per epoch"]
    assert figures["middle step"] > 0 and all(isinstance(v, float) for v in figures.values())


def test_fsync_interference_runs_each_mode_and_cleans_up(overhead: object, tmp_path: Path) -> None:
    """benchmarks/fsync_interference.py: the file work leaves nothing behind, and the helper-process mode runs."""
    module = importlib.import_module("fsync_interference")
    for fsync in ("each", "none", "syncfs"):
        module.file_work(str(tmp_path), fsync, fsync)
    assert list(tmp_path.iterdir()) == []
    figures = module.measure("process", epochs=3)
    assert list(figures) == ["middle step", "edge", "after-edge"] and figures["middle step"] > 0
