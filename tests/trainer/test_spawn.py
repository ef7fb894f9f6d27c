"""``Trainer(strategy="ddp_spawn")``: the worker processes start at each stage, inside this very process (a test),
and rank 0's results come back to the caller. Each spawning test pays two interpreter start-ups (seconds), so
there are three, each checking several things."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from stoker import BasePredictionWriter, ModelCheckpoint, Trainer
from stoker.loggers import CSVLogger
from stoker.trainer.spawn import WorkerError
from tests.helpers.models import Regressor, batches, clone_model, make_loader, make_regression_data, raw_loop
from tests.helpers.weights import params_of


class RankReporter(Regressor):
    """Logs its process's rank without syncing (so only rank 0's value can reach the caller), and 1 per batch
    summed over the processes; in ``fail_on_rank``, the second training batch raises."""

    def __init__(self, fail_on_rank: int | None = None) -> None:
        super().__init__(momentum=0.0)
        self.fail_on_rank = fail_on_rank

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_rank == self.fail_on_rank and batch_idx == 1:
            raise ValueError(f"batch {batch_idx} on rank {self.global_rank} is broken")
        self.log("rank", float(self.global_rank), on_step=False, on_epoch=True)
        self.log("processes", 1.0, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="sum")
        for fx in ("max", "sum"):  # a step value synced by its own reduction
            self.log(f"rank_{fx}", float(self.global_rank), on_step=True, on_epoch=False, sync_dist=True, reduce_fx=fx)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.mse_loss(self(x), y), sync_dist=True)  # the mean over both processes' shares

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def spawn_trainer(root: Path, **kwargs: Any) -> Trainer:
    kwargs = {"strategy": "ddp_spawn", "logger": False, "log_every_n_steps": 1, **kwargs}
    return Trainer(accelerator="cpu", devices=2, default_root_dir=root, enable_progress_bar=False,
                   enable_model_summary=False, **kwargs)


def gone(pids: list[int]) -> bool:
    return bool(pids) and not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_building_the_trainer_starts_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = spawn_trainer(tmp_path)
    assert trainer.accelerator.num_processes == 1 and trainer.processes_per_node == 2
    assert trainer.launcher.pids == []
    # what the workers cannot receive is refused here, before any process starts
    unpicklable = DataLoader(make_regression_data(n=8), batch_size=4, collate_fn=lambda items: items)
    with pytest.raises(TypeError, match="by pickling them"):
        trainer.fit(Regressor(), unpicklable)
    assert trainer.launcher.pids == []
    # one device: nothing to spawn, the stage runs here
    single = Trainer(strategy="ddp_spawn", accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_checkpointing=False, max_steps=1)
    single.fit(Regressor(), make_loader(make_regression_data(n=8)))
    assert single.global_step == 1 and single.launcher.pids == []
    monkeypatch.setenv("WORLD_SIZE", "2")  # already one rank of a launcher: the processes exist
    with pytest.raises(ValueError, match="strategy='ddp'"):
        spawn_trainer(tmp_path)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_fit_in_two_processes_leaves_rank_zero_results_in_the_caller(tmp_path: Path) -> None:
    data = make_regression_data(n=32)
    module = RankReporter()
    # DDP averages the two processes' gradients of 4 samples each: one step of a batch of 8, in order.
    reference = raw_loop(clone_model(module.net), batches(data, 8), epochs=2, momentum=0.0)
    checkpoint = ModelCheckpoint(monitor="val/loss", save_top_k=1)
    trainer = spawn_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint], logger=CSVLogger(tmp_path))
    threads = threading.active_count()
    trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=4))

    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    metrics = trainer.callback_metrics
    assert metrics["rank"] == 0.0  # rank 0's value
    assert metrics["processes"] == 8.0  # summed over the 4 batches of each of the 2 processes
    assert metrics["rank_max"] == 1.0 and metrics["rank_sum"] == 1.0  # ranks 0 and 1: max 1, sum 1 (not the mean)
    assert trainer.state.finished and trainer.current_epoch == 2 and trainer.module is module
    assert os.path.isdir(checkpoint.best_model_path) and checkpoint.best_model_path.startswith(str(tmp_path))
    assert checkpoint.best_model_score is not None
    assert trainer.logger.version == 0 and os.path.isfile(os.path.join(trainer.log_dir, "metrics.csv"))
    assert gone(trainer.launcher.pids) and threading.active_count() == threads
    fit_pids = trainer.launcher.pids

    # validate() after fit: the fitted module by default, its metrics returned from the workers
    results = trainer.validate(dataloaders=make_loader(data, batch_size=4))
    x, y = data.tensors
    with torch.no_grad():
        expected = F.mse_loss(module(x), y).item()  # 4 batches of 4 on each process: the mean over all 32
    assert results == [{"val/loss": pytest.approx(expected, rel=1e-5)}]
    assert trainer.callback_metrics["val/loss"].item() == pytest.approx(expected, rel=1e-5)
    assert trainer.current_epoch == 2 and checkpoint.best_model_path  # what fit left is kept
    assert gone(trainer.launcher.pids) and set(trainer.launcher.pids).isdisjoint(fit_pids)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_an_exception_in_one_worker_is_raised_in_the_caller(tmp_path: Path) -> None:
    trainer = spawn_trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
    with pytest.raises(ValueError, match="batch 1 on rank 1 is broken") as raised:
        trainer.fit(RankReporter(fail_on_rank=1), make_loader(make_regression_data(n=32), batch_size=4))
    cause = raised.value.__cause__
    assert isinstance(cause, WorkerError)
    assert "failed in worker rank 1 of 2" in str(cause) and "in training_step" in str(cause)  # the worker's trace
    assert trainer.state.status == "failed"
    assert gone(trainer.launcher.pids)  # the other worker, blocked in a collective, was stopped too


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_forked_predict_returns_rank_zero_predictions(tmp_path: Path) -> None:
    data = make_regression_data(n=16)
    module = RankReporter()
    trainer = spawn_trainer(tmp_path, enable_checkpointing=False, strategy="ddp_fork")  # forked: no re-import
    predictions = trainer.predict(module, make_loader(data, batch_size=4))
    with torch.no_grad():  # rank 0 reads batches 0 and 2 of the four (rank 1: 1 and 3)
        expected = [module(x) for x, _ in batches(data, 4)[0::2]]
    assert len(predictions) == 2
    for got, want in zip(predictions, expected):
        torch.testing.assert_close(got, want)


class RankIndices(BasePredictionWriter):
    """Writes the sample indices each process predicted into ``folder/rank{r}.json`` (the workers' callbacks are
    copies: a file is how their findings come back)."""

    def __init__(self, folder: Path) -> None:
        super().__init__("epoch")
        self.folder = folder

    def write_on_epoch_end(self, trainer, module, predictions, batch_indices) -> None:
        found = {"indices": [i for batch in batch_indices[0] for i in batch], "sizes": [len(p) for p in predictions]}
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(found))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_predict_in_two_processes_predicts_each_sample_once(tmp_path: Path) -> None:
    # 21 samples in batches of 4: 6 batches, the last of 1. Prediction pads nothing (Lightning's
    # UnrepeatedDistributedSampler): rank 1's last batch is that 1 sample, not completed from the epoch's start.
    trainer = spawn_trainer(tmp_path, enable_checkpointing=False, strategy="ddp_fork", callbacks=[RankIndices(tmp_path)])
    trainer.predict(RankReporter(), make_loader(make_regression_data(n=21), batch_size=4))
    found = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [f["sizes"] for f in found] == [[4, 4, 4], [4, 4, 1]]
    assert sorted(found[0]["indices"] + found[1]["indices"]) == list(range(21))
