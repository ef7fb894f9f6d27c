"""`DeviceStatsMonitor`: the CPU figures of a run on the CPU reach a CSV logger (read back from its file) under
Lightning's names, once per logged step and hook; the CUDA figures are the caching allocator's counters."""

from __future__ import annotations

import csv
import importlib.util
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from stoker.callbacks import DeviceStatsMonitor
from stoker.callbacks import device_stats_monitor as monitor_module
from stoker.callbacks.lr_monitor import NoLoggerError
from stoker.loggers import CSVLogger
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer

PREFIX = "DeviceStatsMonitor."


def read_rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def points(rows: list[dict[str, str]], column: str) -> list[int]:
    """The steps at which ``column`` has a value."""
    return [int(row["step"]) for row in rows if row.get(column)]


def fit(tmp_path: Path, callback: DeviceStatsMonitor, **kwargs) -> tuple[CSVLogger, object]:
    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(logger=logger, callbacks=[callback], **kwargs)
    module = Regressor()
    trainer.fit(module, make_loader(make_regression_data(n=32)), make_loader(make_regression_data(n=16, seed=1)))
    return logger, trainer


def test_cpu_figures_reach_the_logger_once_per_logged_step_and_hook(tmp_path: Path) -> None:
    logger, trainer = fit(tmp_path, DeviceStatsMonitor(), max_epochs=1, log_every_n_steps=1)
    rows = read_rows(logger)
    for hook in ("on_train_batch_start", "on_train_batch_end"):
        for figure in monitor_module.CPU_FIGURES:
            assert points(rows, f"{PREFIX}{hook}/{figure}") == [1, 2, 3, 4], (hook, figure)
    # the validation's batches, at the step the fit had reached (equal values at one step share a CSV row)
    assert set(points(rows, f"{PREFIX}on_validation_batch_end/cpu_percent")) == {4}
    for row in rows:
        for name, value in row.items():
            if name.startswith(PREFIX) and value:
                assert 0.0 <= float(value) <= 100.0, (name, value)
    trainer.test(Regressor(), make_loader(make_regression_data(n=8)))
    columns = read_rows(logger)[0].keys()
    assert f"{PREFIX}on_test_batch_start/cpu_vm_percent" in columns
    assert f"{PREFIX}on_test_batch_end/cpu_swap_percent" in columns


def test_with_accumulation_a_step_is_read_once_on_the_logged_steps_only(tmp_path: Path) -> None:
    logger, _ = fit(tmp_path, DeviceStatsMonitor(), max_epochs=1, log_every_n_steps=2, accumulate=2)
    rows = read_rows(logger)  # 4 batches of 8, windows of 2: steps 1 and 2; only step 2 is logged
    assert points(rows, f"{PREFIX}on_train_batch_start/cpu_percent") == [2]
    assert points(rows, f"{PREFIX}on_train_batch_end/cpu_percent") == [2]


class RecordingCSVLogger(CSVLogger):
    """A CSVLogger that also records each ``log_metrics`` call's step and hooks."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, str]] = []

    def log_metrics(self, metrics, step=None) -> None:
        hooks = {name[len(PREFIX):].split("/")[0] for name in metrics if name.startswith(PREFIX)}
        self.calls += [(step, hook) for hook in sorted(hooks)]
        super().log_metrics(metrics, step)


@pytest.mark.parametrize("every, batches", [(1, [0, 1, 2, 3]), (2, [0, 2])])
def test_evaluation_batches_are_read_every_n_batches_at_the_runs_step(tmp_path: Path, every: int,
                                                                       batches: list[int]) -> None:
    logger = RecordingCSVLogger(tmp_path)
    trainer = quiet_trainer(logger=logger, callbacks=[DeviceStatsMonitor()], max_epochs=1, log_every_n_steps=every)
    module = Regressor()
    trainer.fit(module, make_loader(make_regression_data(n=16)), make_loader(make_regression_data(n=32, seed=1)))
    validation = [call for call in logger.calls if call[1].startswith("on_validation")]
    # 4 validation batches after 2 steps: batch_idx 0, every, 2*every... each read at its start and end, at step 2
    assert validation == [(2, hook) for _ in batches for hook in ("on_validation_batch_start",
                                                                   "on_validation_batch_end")]
    logger.calls.clear()
    trainer.test(module, make_loader(make_regression_data(n=32, seed=2)))
    assert [call for call in logger.calls if call[1].startswith("on_test")] == [
        (2, hook) for _ in batches for hook in ("on_test_batch_start", "on_test_batch_end")]


def test_cpu_stats_false_logs_nothing_on_a_cpu(tmp_path: Path) -> None:
    logger, _ = fit(tmp_path, DeviceStatsMonitor(cpu_stats=False), max_epochs=1, log_every_n_steps=1)
    assert not [name for name in read_rows(logger)[0] if name.startswith(PREFIX)]


def test_a_trainer_without_logger_is_refused_when_the_fit_starts() -> None:
    trainer = quiet_trainer(callbacks=[DeviceStatsMonitor()], max_epochs=1)
    with pytest.raises(NoLoggerError, match="logger=False"):
        trainer.fit(Regressor(), make_loader(make_regression_data(n=16)))


def test_a_fast_dev_run_asked_to_log_runs_the_monitors_without_a_logger(tmp_path: Path) -> None:
    # Lightning swaps the loggers for a DummyLogger in a debugging run, so its monitors find one and log nothing
    from stoker import Trainer
    from stoker.callbacks import LearningRateMonitor

    lr = LearningRateMonitor()
    trainer = Trainer(fast_dev_run=True, logger=CSVLogger(str(tmp_path)), enable_progress_bar=False,
                      enable_model_summary=False, callbacks=[DeviceStatsMonitor(cpu_stats=False), lr])
    trainer.fit(Regressor(), make_loader(make_regression_data(n=16)))
    assert trainer.global_step == 1 and trainer.loggers == [] and list(lr.lrs) == ["lr-SGD"]
    assert not list(tmp_path.rglob("metrics.csv"))  # nothing written


def test_without_psutil_the_cpu_figures_are_refused_but_cpu_stats_false_runs(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psutil" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="psutil is not installed"):
        fit(tmp_path / "a", DeviceStatsMonitor(), max_epochs=1, log_every_n_steps=1)
    fit(tmp_path / "b", DeviceStatsMonitor(cpu_stats=False), max_epochs=1, log_every_n_steps=1)


def test_cuda_figures_are_the_allocators_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = OrderedDict([("allocated_bytes.all.current", 512), ("num_ooms", 0), ("note", "not a number")])
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: stats)
    assert monitor_module.device_stats(torch.device("cuda", 0)) == {"allocated_bytes.all.current": 512.0,
                                                                    "num_ooms": 0.0}
    assert monitor_module.device_stats(torch.device("cpu")) == {}


def test_cpu_stats_must_be_a_bool_or_none() -> None:
    with pytest.raises(TypeError, match="cpu_stats"):
        DeviceStatsMonitor(cpu_stats="yes")  # type: ignore[arg-type]
