"""ThroughputMonitor in real fits, on a fake clock the steps advance: rates, MFU, validation time left out,
totals carried across a resume."""

from __future__ import annotations

import pytest
import torch

from stoker import ThroughputMonitor
from stoker.callbacks import throughput
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.trackers_readback import ListLogger


class Clock:
    now = 100.0

    def perf_counter(self) -> float:
        return self.now


class Timed(Regressor):
    """Each training batch takes 0.5 s of the fake clock, each validation batch 10 s."""

    clock: Clock

    def training_step(self, batch, batch_idx):
        self.clock.now += 0.5
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.clock.now += 10.0
        return super().validation_step(batch, batch_idx)


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(throughput, "time", fake)
    Timed.clock = fake
    return fake


def _rows(logger: ListLogger, name: str) -> list[tuple[int, float]]:
    return [(step, row[name]) for step, row in logger.rows if name in row]


def test_training_rates_every_n_steps_without_validation_time(tmp_path, clock):
    logger = ListLogger()
    monitor = ThroughputMonitor(flops_per_batch=100.0, peak_flops=1000.0)
    t = trainer(tmp_path, max_epochs=2, callbacks=[monitor], logger=logger, log_every_n_steps=2)
    t.fit(Timed(), *loaders())  # 4 batches of 8 per epoch, 2 validation batches of 8 after each epoch
    assert _rows(logger, "train/device/samples_per_sec") == [(2, 16.0), (4, 16.0), (6, 16.0), (8, 16.0)]
    assert _rows(logger, "train/device/batches_per_sec") == [(s, 2.0) for s in (2, 4, 6, 8)]
    assert _rows(logger, "train/device/flops_per_sec") == [(s, 200.0) for s in (2, 4, 6, 8)]
    assert _rows(logger, "train/device/mfu") == [(s, 0.2) for s in (2, 4, 6, 8)]
    assert "train/samples_per_sec" not in monitor.metrics  # job totals only with several processes
    assert monitor.metrics["train/time"] == 4.0 and monitor.metrics["train/samples"] == 64  # 20 s validating left out
    # Validation: 16 samples in 20 s, a third of the training FLOPs per batch (forward only).
    assert _rows(logger, "validate/device/samples_per_sec") == [(4, 0.8), (8, 0.8)]
    assert _rows(logger, "validate/device/flops_per_sec") == [(4, pytest.approx(100 / 3 * 2 / 20)),
                                                               (8, pytest.approx(100 / 3 * 2 / 20))]


def test_accumulation_counts_micro_batches_and_reports_per_optimizer_step(tmp_path, clock):
    monitor = ThroughputMonitor(log_every_n_steps=1, batch_size_fn=lambda batch: 2 * len(batch[0]))
    t = trainer(tmp_path, max_epochs=1, accumulate=2, callbacks=[monitor], logger=ListLogger())
    t.fit(Timed(), loaders()[0])
    rows = _rows(t.logger, "train/device/batches_per_sec")
    assert rows == [(1, 2.0), (2, 2.0)]  # two micro-batches of 0.5 s per step
    assert monitor.metrics["train/device/samples_per_sec"] == 32.0  # batch_size_fn counts 16 per batch
    assert "train/device/flops_per_sec" not in monitor.metrics  # no FLOP count anywhere


def test_module_flops_attribute_items_and_test_stage(tmp_path, clock):
    class WithFlops(Timed):
        flops_per_batch = 30.0
        eval_flops_per_batch = 12.0

        def test_step(self, batch, batch_idx):
            self.clock.now += 1.0

    monitor = ThroughputMonitor(length_fn=lambda batch: batch[0].numel(), log_every_n_steps=4, peak_flops=60.0)
    t = trainer(tmp_path, max_epochs=1, callbacks=[monitor], logger=ListLogger())
    module = WithFlops()
    t.fit(module, loaders()[0])
    assert monitor.metrics["train/device/items_per_sec"] == 8 * 8 / 0.5  # 8 samples of 8 features per 0.5 s
    assert monitor.metrics["train/device/mfu"] == 30.0 / 0.5 / 60.0
    t.test(module, loaders()[1])
    assert monitor.metrics["test/device/batches_per_sec"] == 1.0
    assert monitor.metrics["test/device/flops_per_sec"] == 12.0 and monitor.metrics["test/items"] == 2 * 64


def test_training_totals_continue_after_a_resume(tmp_path, clock):
    first = ThroughputMonitor(log_every_n_steps=1)
    trainer(tmp_path, max_epochs=1, callbacks=[first]).fit(Timed(), *loaders())
    assert first.metrics["train/samples"] == 32
    second = ThroughputMonitor(log_every_n_steps=1)
    trainer(tmp_path, max_epochs=2, callbacks=[second]).fit(Timed(), *loaders(), ckpt_path="last")
    assert second.metrics["train/samples"] == 64 and second.metrics["train/batches"] == 8
    assert second.metrics["train/time"] == 4.0  # 2 s before the checkpoint, 2 s after
    assert second.metrics["train/device/samples_per_sec"] == 16.0


def test_batch_size_inference_and_argument_checks():
    assert throughput._infer_batch_size({"x": [torch.zeros(5, 2)], "y": torch.zeros(5)}) == 5
    with pytest.raises(ValueError, match="batch_size_fn=lambda batch"):
        throughput._infer_batch_size(["a", "b"])
    with pytest.raises(ValueError, match="peak_flops=0"):
        ThroughputMonitor(peak_flops=0)
    with pytest.raises(TypeError, match="batch_size_fn=3"):
        ThroughputMonitor(batch_size_fn=3)
    with pytest.raises(ValueError, match="log_every_n_steps=0"):
        ThroughputMonitor(log_every_n_steps=0)


class Slow(Timed):
    """Training step k (counted from 1) takes k * 0.5 s; the end of each epoch (before its validation) takes 7 s
    and each validation batch 10 s."""

    def training_step(self, batch, batch_idx):
        self.clock.now += 0.5 * self.global_step  # the Timed step adds the other 0.5 s
        return super().training_step(batch, batch_idx)

    def on_validation_epoch_start(self):
        self.clock.now += 7.0


def test_training_time_ends_with_the_last_step_and_restarts_after_validation(tmp_path, clock):
    monitor = ThroughputMonitor(log_every_n_steps=1, separator="|")
    t = trainer(tmp_path, max_epochs=2, callbacks=[monitor], logger=ListLogger(), num_sanity_val_steps=2)
    t.fit(Slow(), *loaders())
    # steps 1..8 take 0.5 .. 4.0 s; the 7 s before each validation and the validations are not training time
    assert monitor.metrics["train|time"] == sum(0.5 * k for k in range(1, 9))
    assert monitor.metrics["validate|time"] == 2 * (7.0 + 20.0) and monitor.metrics["validate|batches"] == 4
    assert monitor.metrics["train|device|batches_per_sec"] == 1 / 4.0  # the last step alone
    assert "train/time" not in monitor.metrics  # the separator replaces every '/'


def test_window_size_gives_rates_over_the_last_steps(tmp_path, clock):
    monitor = ThroughputMonitor(log_every_n_steps=1, window_size=3)
    logger = ListLogger()
    trainer(tmp_path, max_epochs=1, callbacks=[monitor], logger=logger, log_every_n_steps=1).fit(Slow(), loaders()[0])
    # no rate before three steps; then three batches over the last three steps' seconds
    assert _rows(logger, "train/device/batches_per_sec") == [(3, 3 / 3.0), (4, 3 / 4.5)]
    assert [step for step, row in logger.rows if "train/time" in row] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="window_size=0"):
        ThroughputMonitor(window_size=0)
    with pytest.raises(ValueError, match="separator=''"):
        ThroughputMonitor(separator="")


def test_the_clock_is_read_once_per_step_and_twice_per_validation(tmp_path, clock, monkeypatch):
    reads = []
    monkeypatch.setattr(clock, "perf_counter", lambda: reads.append(1) or clock.now, raising=False)
    trainer(tmp_path, max_epochs=2, callbacks=[ThroughputMonitor(log_every_n_steps=3)],
            num_sanity_val_steps=2).fit(Timed(), *loaders())
    assert len(reads) == 1 + 8 + 2 * 2  # the start, 8 steps, 2 validations (the sanity check is not measured)
