"""``stoker.utilities.parsing`` (Lightning's ``utilities.parsing`` path): where ``lightning_getattr`` & co. find a
value (the tuner's lookup), ``clean_namespace`` and ``is_picklable``."""

from __future__ import annotations

import argparse
import threading

import pytest
import torch

from stoker import DataModule, Trainer, TrainingModule
from stoker.utilities.parsing import (clean_namespace, is_picklable, lightning_getattr, lightning_hasattr,
                                      lightning_setattr)


class Namespaced:
    """An ``hparams`` that is no mapping but answers ``in`` (a namespace object)."""

    learning_rate = 1

    def __contains__(self, name: str) -> bool:
        return name == "learning_rate"


def attached(module: TrainingModule, datamodule: DataModule | None) -> TrainingModule:
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.datamodule = datamodule
    module.trainer = trainer
    return module


def test_the_value_is_found_on_the_module_its_hparams_or_its_data_module() -> None:
    plain = TrainingModule()
    plain.lr = 0.1
    data = DataModule()
    data.batch_size = 8
    with_data = attached(TrainingModule(), data)
    assert lightning_getattr(plain, "lr") == 0.1 and lightning_hasattr(plain, "lr")
    assert lightning_getattr(with_data, "batch_size") == 8
    lightning_setattr(with_data, "batch_size", 64)
    assert data.batch_size == 64
    for module in (plain, with_data, TrainingModule()):  # unattached: no data module, and no error for it
        assert not lightning_hasattr(module, "missing")
        with pytest.raises(AttributeError, match="neither stored in the model namespace nor the `hparams`"):
            lightning_getattr(module, "missing")
        with pytest.raises(AttributeError, match="nor the datamodule"):
            lightning_setattr(module, "missing", 1)


def test_hparams_in_a_namespace_and_the_data_modules_value_in_force() -> None:
    namespaced = TrainingModule()
    namespaced.hparams = Namespaced()
    assert lightning_getattr(namespaced, "learning_rate") == 1
    data = DataModule()
    data.batch_size = 8
    both = TrainingModule()
    both.hparams = {"batch_size": 2, "lr": 0.5}
    both = attached(both, data)
    assert lightning_getattr(both, "batch_size") == 8  # the data module's, as the tuner uses it
    lightning_setattr(both, "batch_size", 16)  # written everywhere it is found
    assert data.batch_size == 16 and both.hparams["batch_size"] == 16
    assert lightning_getattr(both, "lr") == 0.5


def test_clean_namespace_and_is_picklable() -> None:
    lock = threading.Lock()
    values = {"a": 1, "b": lock, "c": "text"}
    clean_namespace(values)
    assert values == {"a": 1, "c": "text"}
    namespace = argparse.Namespace(a=1, f=lambda: None)
    clean_namespace(namespace)
    assert vars(namespace) == {"a": 1}
    assert is_picklable(max) and not is_picklable(lock) and not is_picklable(torch.jit.ScriptModule())


def test_a_class_attribute_hparams_is_the_modules_own_as_in_lightning() -> None:
    class WithDict(TrainingModule):
        hparams = {"batch_size": 2}

    module = WithDict()
    assert module.hparams is WithDict.hparams and lightning_getattr(module, "batch_size") == 2
    assert TrainingModule().hparams == {}  # otherwise each module has its own, empty until save_hyperparameters
