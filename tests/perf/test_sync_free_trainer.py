"""The Trainer's step: host-device syncs counted per optimizer step (see tests/helpers/sync_counter.py).

``Trainer.fit`` with ``self.log`` every step, the progress bar and a logger makes none between log steps, in one
process and in two (where the cross-rank preemption agreement is a non-blocking all-reduce of a host flag whose
result is read one optimizer step later); fp16 makes exactly GradScaler's one read of ``found_inf`` per step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist_spawn import read_results, run_workers
from tests.helpers.sync_loops import trainer_fit

COUNTED = 6


@pytest.mark.parametrize("precision, expected", [("fp32", 0), ("bf16", 0), ("fp16", COUNTED)])
def test_trainer_with_logging_bar_and_logger_is_sync_free_between_log_steps(tmp_path: Path, precision: str,
                                                                             expected: int) -> None:
    counter, trainer = trainer_fit(precision, root=str(tmp_path), counted_steps=COUNTED, logger="csv")
    assert trainer.global_step == 2 + COUNTED + 1
    assert counter.count == expected, counter.report()  # fp16: GradScaler's one read of found_inf per step


def test_values_reach_the_host_only_when_a_logger_is_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter sees the Trainer: with log_every_n_steps=1 the logged values are read every step."""
    from stoker import Trainer

    init = Trainer.__init__
    monkeypatch.setattr(Trainer, "__init__", lambda self, **kw: init(self, **{**kw, "log_every_n_steps": 1}))
    counter, _ = trainer_fit("fp32", root=str(tmp_path), counted_steps=COUNTED, logger="csv")
    assert counter.count >= COUNTED, counter.report()
    assert any("loggers" in site for site in counter.by_site()), counter.report()


@pytest.mark.distributed
def test_trainer_in_two_processes_is_sync_free_between_log_steps(tmp_path: Path) -> None:
    """DDP over gloo: the per-step preemption agreement is a non-blocking all-reduce of a host flag read one step
    later (stoker/accelerator/distributed/agreement.py, SignalAgreement), so no step waits; fp16 keeps GradScaler's one read."""
    run_workers("sync_worker.py", [tmp_path, "trainer"], nprocs=2, timeout=150)
    for rank, result in enumerate(read_results(tmp_path)):
        for precision, expected in (("fp32", 0), ("bf16", 0), ("fp16", COUNTED)):
            got = result[precision]
            assert got["processes"] == 2 and got["strategy"] == "DDPStrategy", got
            assert got["steps"] == 2 + COUNTED + 1, got
            assert got["count"] == expected, f"rank {rank}, {precision}: {got['report']}"
