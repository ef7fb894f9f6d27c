"""EarlyStopping says why it stopped through its module's logger (``stoker.callbacks.early_stopping.log``), at INFO,
each process with its rank in front when several run."""

from __future__ import annotations

import logging

import torch

from stoker import EarlyStopping
from stoker.callbacks import early_stopping
from tests.callbacks.fakes import FakeAccelerator, FakeTrainer


class _SecondOfTwo(FakeAccelerator):
    num_processes, process_index = 2, 1


def _stop_once(tmp_path, accelerator=None) -> FakeTrainer:
    stop = EarlyStopping("val/loss", patience=0)
    trainer = FakeTrainer(str(tmp_path), callbacks=[stop], num_val_batches=[2], fitting=True,
                          val_check_interval=0.5)  # two validations per epoch: each one's end is a check
    trainer.accelerator = accelerator or trainer.accelerator
    trainer.callback_metrics["val/loss"] = torch.tensor(1.0)
    stop.on_validation_end(trainer, trainer.module)  # 1.0 improves on the start; the same value again stops
    trainer.current_epoch += 1
    stop.on_validation_end(trainer, trainer.module)
    assert trainer.should_stop
    return trainer


def test_the_stop_is_logged_at_info_by_the_modules_logger(tmp_path, caplog):
    assert early_stopping.log.name == "stoker.callbacks.early_stopping"
    with caplog.at_level(logging.INFO, logger="stoker.callbacks.early_stopping"):
        _stop_once(tmp_path)
    [record] = caplog.records
    assert record.levelno == logging.INFO and record.message.startswith("EarlyStopping: val/loss did not improve")
    assert record.message.endswith("Stopping at epoch 1.")


def test_with_several_processes_each_line_names_its_rank(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="stoker.callbacks.early_stopping"):
        _stop_once(tmp_path, _SecondOfTwo())
    assert [r.message[:len("[rank: 1] EarlyStopping:")] for r in caplog.records] == ["[rank: 1] EarlyStopping:"]
