"""DataModule: Lightning's LightningDataModule contract (the class; the Trainer's datamodule= is tested elsewhere)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import stoker
from stoker import DataModule
from stoker.trainer.datamodule import defines, prepare_data_once
from tests.helpers.models import make_regression_data


class Squares(DataModule):
    """A data module as a user writes one: hyperparameters, a one-time preparation, per-stage datasets, state."""

    def __init__(self, n: int = 12, batch_size: int = 4, note: str = "x") -> None:
        super().__init__()
        self.save_hyperparameters(ignore="note")
        self.prepared = 0
        self.stages: list[str] = []
        self.epochs_seen = 0

    def prepare_data(self) -> None:
        self.prepared += 1

    def setup(self, stage: str) -> None:
        self.stages.append(stage)
        x = torch.arange(self.hparams.n, dtype=torch.float32).unsqueeze(1)
        self.full = TensorDataset(x, x**2)

    def teardown(self, stage: str) -> None:
        self.stages.append(f"teardown:{stage}")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.full, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.full, batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict:
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epochs_seen = int(state_dict["epochs_seen"])


def test_exported_from_stoker():
    assert stoker.DataModule is DataModule
    assert "DataModule" in dir(stoker) and "seed_everything" in dir(stoker)


def test_hooks_hparams_and_state_of_a_subclass():
    dm = Squares(n=8, batch_size=2, note="dropped")
    assert dict(dm.hparams) == {"n": 8, "batch_size": 2} and dm.hparams.batch_size == 2
    assert dm.trainer is None and dm.prepare_data_per_node is True
    dm.prepare_data()
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == 4 and sorted(torch.cat([x for x, _ in batches]).flatten().tolist()) == list(range(8))
    assert len(list(dm.val_dataloader())) == 4
    dm.teardown("fit")
    assert dm.stages == ["fit", "teardown:fit"]
    dm.epochs_seen = 3
    other = Squares()
    other.load_state_dict(dm.state_dict())
    assert other.epochs_seen == 3
    assert repr(dm) == "Squares(n=8, batch_size=2)"


def test_the_base_class_defaults():
    dm = DataModule()
    assert dm.state_dict() == {} and dict(dm.hparams) == {}
    assert dm.prepare_data() is None and dm.setup("fit") is None and dm.teardown("test") is None
    dm.load_state_dict({})
    for hook, caller in (("train_dataloader", "Trainer.fit"), ("val_dataloader", "Trainer.validate"),
                         ("test_dataloader", "Trainer.test"), ("predict_dataloader", "Trainer.predict")):
        with pytest.raises(NotImplementedError, match=f"DataModule does not define {hook}\\(\\); {caller}"):
            getattr(dm, hook)()


def test_defines_tells_which_loader_hooks_exist():
    dm = Squares()
    assert defines(dm, "train_dataloader") and defines(dm, "val_dataloader")
    assert not defines(dm, "test_dataloader") and not defines(dm, "predict_dataloader")
    assert not defines(DataModule(), "train_dataloader")
    with pytest.raises(ValueError, match="not a loader hook"):
        defines(dm, "setup")


def test_save_hyperparameters_selects_names_and_reports_unknown_ones():
    class Pick(DataModule):
        def __init__(self, a: int = 1, b: int = 2, *extra: int, **kw: int) -> None:
            super().__init__()
            self.save_hyperparameters("a", "kw_only") if kw.get("kw_only") else self.save_hyperparameters("b")

    assert dict(Pick(5, 6).hparams) == {"b": 6}
    assert dict(Pick(5, 6, kw_only=3).hparams) == {"a": 5, "kw_only": 3}

    class Wrong(DataModule):
        def __init__(self, a: int = 1) -> None:
            super().__init__()
            self.save_hyperparameters("z")

    with pytest.raises(ValueError, match=r"\['z'\] are not arguments of Wrong.__init__"):
        Wrong()


def test_save_hyperparameters_before_super_init_still_works():
    class Early(DataModule):
        def __init__(self, size: int = 3) -> None:
            self.save_hyperparameters()
            self.trainer = None

    assert dict(Early(4).hparams) == {"size": 4}


def test_from_datasets_builds_the_given_loaders_only():
    train, val = make_regression_data(10), make_regression_data(6, seed=1)
    dm = DataModule.from_datasets(train, val, batch_size=4)
    assert defines(dm, "train_dataloader") and defines(dm, "val_dataloader")
    assert not defines(dm, "test_dataloader") and not defines(dm, "predict_dataloader")
    loader = dm.train_dataloader()
    assert isinstance(loader, DataLoader) and loader.batch_size == 4 and loader.num_workers == 0
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)  # training data is shuffled
    val_loader = dm.val_dataloader()
    assert isinstance(val_loader.sampler, torch.utils.data.SequentialSampler)
    assert [len(b[0]) for b in val_loader] == [4, 2]
    assert dm.train_dataloader() is not loader  # a fresh loader per call, like a method a user writes
    with pytest.raises(NotImplementedError):
        dm.test_dataloader()


def test_from_datasets_with_several_datasets_and_iterables():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.arange(5.0))

    sets = [make_regression_data(4), make_regression_data(8)]
    dm = DataModule.from_datasets(train_dataset=Stream(), test_dataset=sets, predict_dataset={"a": sets[0]},
                                  batch_size=2)
    assert torch.cat(list(dm.train_dataloader())).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # iterable: never shuffled
    assert [len(loader) for loader in dm.test_dataloader()] == [2, 4]
    assert list(dm.predict_dataloader()) == ["a"]


def test_from_datasets_passes_batch_size_to_a_subclass_that_takes_it():
    class Sized(DataModule):
        def __init__(self, batch_size: int = 1, tag: str = "") -> None:
            super().__init__()
            self.save_hyperparameters()

    dm = Sized.from_datasets(make_regression_data(4), batch_size=2, tag="t")
    assert dict(dm.hparams) == {"batch_size": 2, "tag": "t"} and isinstance(dm, Sized)


@pytest.mark.parametrize("kwargs, message", [
    ({"train_dataset": [1, 2, 3]}, "from_datasets\\(train_dataset=...\\) got a int"),
    ({"val_dataset": torch.ones(3)}, "from_datasets\\(val_dataset=...\\) got a Tensor"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"num_workers": -1}, "num_workers=-1"),
])
def test_from_datasets_refuses_what_is_not_a_dataset(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        DataModule.from_datasets(**kwargs)


class _FakeAccelerator:
    """The three facts prepare_data_once reads, and a reduce that adds the failures of 'other processes'."""

    def __init__(self, local_main: bool, main: bool, processes: int = 2, others_failed: int = 0) -> None:
        self.is_local_main_process, self.is_main_process = local_main, main
        self.num_processes, self.device, self.others_failed = processes, torch.device("cpu"), others_failed
        self.reduced = 0

    def reduce(self, tensor: torch.Tensor, reduction: str) -> torch.Tensor:
        assert reduction == "sum"
        self.reduced += 1
        return tensor + self.others_failed


@pytest.mark.parametrize("per_node, local_main, main, runs", [
    (True, True, False, 1),   # the first process of a second node prepares its node's copy
    (True, False, False, 0),
    (False, True, False, 0),  # shared storage: only the job's main process prepares
    (False, True, True, 1),
])
def test_prepare_data_once_runs_on_the_chosen_process_and_waits_for_all(per_node, local_main, main, runs):
    dm = Squares()
    dm.prepare_data_per_node = per_node
    accelerator = _FakeAccelerator(local_main, main)
    prepare_data_once(dm, accelerator)
    assert dm.prepared == runs and accelerator.reduced == 1  # every process passes the same collective


def test_prepare_data_once_in_one_process_needs_no_collective():
    dm, accelerator = Squares(), _FakeAccelerator(True, True, processes=1)
    prepare_data_once(dm, accelerator)
    assert dm.prepared == 1 and accelerator.reduced == 0


def test_a_failed_prepare_data_stops_every_process():
    class Broken(DataModule):
        def prepare_data(self) -> None:
            raise OSError("download failed")

    with pytest.raises(OSError, match="download failed"):  # the failing process: its own error, after the collective
        prepare_data_once(Broken(), _FakeAccelerator(True, True))
    waiting = _FakeAccelerator(False, False, others_failed=1)
    with pytest.raises(RuntimeError, match=r"Broken.prepare_data\(\) failed on 1 other process"):
        prepare_data_once(Broken(), waiting)


def test_prepare_data_once_with_a_real_accelerator_and_any_object():
    accelerator = stoker.Accelerator(cpu=True)
    module = SimpleNamespace(prepare_data=lambda: calls.append(1))
    calls: list[int] = []
    prepare_data_once(module, accelerator)
    prepare_data_once(object(), accelerator)  # nothing to prepare: nothing happens
    assert calls == [1]


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def test_str_lists_the_dataset_size_behind_each_loader_method():
    dm = Squares(n=8)
    lines = ["{Train dataloader: None}", "{Validation dataloader: None}", "{Test dataloader: None}",
             "{Predict dataloader: None}"]
    assert str(dm) == os.linesep.join(lines)  # before setup the methods fail: nothing to size yet
    dm.setup("fit")
    lines[:2] = ["{Train dataloader: size=8}", "{Validation dataloader: size=8}"]
    assert str(dm) == os.linesep.join(lines)
    assert repr(dm) == "Squares(n=8, batch_size=4)"  # the repr stays the class and its hyperparameters

    several = DataModule.from_datasets(train_dataset=[dm.full, _Stream()], test_dataset={"a": _Stream()})
    assert str(several).splitlines() == ["{Train dataloader: 1. size=8 ; 2. size=NA}", "{Validation dataloader: None}",
                                         "{Test dataloader: a. size=NA}", "{Predict dataloader: None}"]
