"""What the built-in callbacks tell a Lightning user along the way: renamed learning-rate histories when a
fine-tuning callback adds a param group, the scheduler StochasticWeightAveraging replaces, a ThroughputMonitor
without a FLOP count, and callbacks given as ``Mock(spec=Callback)``."""

from __future__ import annotations

import logging
import warnings
from unittest.mock import Mock

import pytest
import torch

from stoker import (
    BaseFinetuning,
    Callback,
    LearningRateMonitor,
    StochasticWeightAveraging,
    ThroughputMonitor,
)
from stoker.loggers import CSVLogger
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class TrainableOnly(Regressor):
    """Optimizes only the parameters that are trainable when the optimizer is built (the fine-tuning recipe)."""

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


class ThawLastLayer(BaseFinetuning):
    """Freezes the MLP's last layer, then thaws it into a second param group at epoch 1."""

    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.net[-1])

    def finetune_function(self, pl_module, epoch, optimizer):
        if epoch == 1:
            self.unfreeze_and_add_param_group(pl_module.net[-1], optimizer, lr=0.01)


class NamesAtStart(Callback):
    def __init__(self, monitor: LearningRateMonitor) -> None:
        self.monitor, self.names = monitor, None

    def on_train_start(self, trainer, module):
        self.names = {name: list(values) for name, values in self.monitor.lrs.items()}


def test_a_thawed_param_group_renames_the_optimizers_lr_history(tmp_path):
    monitor = LearningRateMonitor()
    at_start = NamesAtStart(monitor)
    t = trainer(tmp_path, max_epochs=3, logger=CSVLogger(tmp_path), enable_checkpointing=False,
                callbacks=[ThawLastLayer(), monitor, at_start])
    t.fit(TrainableOnly(), *loaders())
    assert at_start.names == {"lr-SGD": []}  # every name is there, empty, before the first value
    # one group in epoch 0, two from epoch 1 on: the first group's values stay together under its new name
    assert list(monitor.lrs) == ["lr-SGD/pg1", "lr-SGD/pg2"]
    assert monitor.lrs["lr-SGD/pg1"] == pytest.approx([0.1, 0.1, 0.1])
    assert monitor.lrs["lr-SGD/pg2"] == pytest.approx([0.01, 0.01])


def test_thawing_parameters_the_optimizer_already_has_names_the_fix(tmp_path):
    t = trainer(tmp_path, max_epochs=2, enable_checkpointing=False, callbacks=[ThawLastLayer()])
    with pytest.warns(UserWarning, match="Did you init your optimizer in configure_optimizers with all"):
        t.fit(Regressor(), *loaders())  # Regressor's optimizer holds every parameter, the frozen layer too


@pytest.mark.parametrize(("interval", "frequency", "warns"), [("step", 1, True), ("epoch", 2, True),
                                                              ("epoch", 1, False)])
def test_swa_says_which_scheduler_it_replaces(tmp_path, caplog, interval, frequency, warns):
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)
    t = trainer(tmp_path, max_epochs=1, callbacks=[swa], enable_checkpointing=False)
    module = Regressor(scheduler="step", interval=interval, frequency=frequency)
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.fit(module, loaders()[0])
    replaced = [w for w in caught if "SWA is currently only supported every epoch" in str(w.message)]
    assert len(replaced) == (1 if warns else 0)
    if warns:
        assert f"interval={interval!r}, frequency={frequency}" in str(replaced[0].message)
    assert "Swapping scheduler `StepLR` for `SWALR`" in caplog.text


def _no_flops_warnings(tmp_path, monitor: ThroughputMonitor, module: Regressor) -> int:
    t = trainer(tmp_path, max_epochs=2, callbacks=[monitor], enable_checkpointing=False, logger=CSVLogger(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.fit(module, *loaders())
        t.validate(module, loaders()[1])
    return sum("define a `flops_per_batch`" in str(w.message) for w in caught)


def test_throughput_monitor_warns_once_without_a_flop_count(tmp_path):
    assert _no_flops_warnings(tmp_path, ThroughputMonitor(), Regressor()) == 1  # two epochs, validations, once
    assert _no_flops_warnings(tmp_path, ThroughputMonitor(flops_per_batch=100.0), Regressor()) == 0
    module = Regressor()
    module.flops_per_batch = 100.0
    assert _no_flops_warnings(tmp_path, ThroughputMonitor(), module) == 0


def test_a_mock_with_the_callback_spec_is_a_callback(tmp_path):
    mock = Mock(spec=Callback)
    t = trainer(tmp_path, max_epochs=1, callbacks=[mock], enable_checkpointing=False)
    t.fit(Regressor(), *loaders())
    called = {c[0] for c in mock.method_calls}
    assert {"setup", "on_fit_start", "on_train_batch_end", "on_validation_end", "teardown"} <= called
