"""A profiler times the hooks a data module defines (set-up, loaders, its state in checkpoints) as
``[DataModule]{class}.{hook}``, leaves the data module as it was after the run, and the profilers are reachable by
Lightning's module paths; a bad ``table_kwargs`` is refused with an error that is both ValueError and KeyError."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from stoker.profilers.advanced import AdvancedProfiler
from stoker.profilers.base import PassThroughProfiler
from stoker.profilers.profiler import Profiler
from stoker.profilers.simple import SimpleProfiler
from stoker.trainer import profilers
from stoker.trainer.datamodule import DataModule, defines
from stoker.trainer.profiler_torch import PyTorchProfiler, TableKwargsError
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class Data(DataModule):
    """Defines set-up, state and the train/val loaders; leaves teardown and the test/predict loaders to the base."""

    def __init__(self) -> None:
        super().__init__()
        self.train, self.val = loaders()
        self.restored: dict[str, Any] | None = None

    def prepare_data(self) -> None: ...

    def setup(self, stage: str) -> None: ...

    def train_dataloader(self) -> DataLoader:
        return self.train

    def val_dataloader(self) -> DataLoader:
        return self.val

    def state_dict(self) -> dict[str, Any]:
        return {"seen": 1}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored = state_dict


def _durations(t: Any) -> dict[str, list[float]]:
    return {k: v for k, v in t.profiler.recorded_durations.items() if k.startswith("[DataModule]")}


def test_the_data_modules_own_hooks_are_timed_once_each_and_removed_after(tmp_path) -> None:
    data = Data()
    t = trainer(tmp_path, max_epochs=1, profiler="simple")
    t.fit(Regressor(), datamodule=data)
    timed = _durations(t)
    assert sorted(timed) == [f"[DataModule]Data.{h}" for h in
                             ("prepare_data", "setup", "state_dict", "train_dataloader", "val_dataloader")]
    assert all(len(v) == 1 and v[0] >= 0 for v in timed.values())
    assert "teardown" not in vars(data) and "setup" not in vars(data)  # the instance holds no wrapper after
    assert not defines(data, "test_dataloader")  # a hook the class leaves to the base stays undefined

    resumed = trainer(tmp_path, max_epochs=2, profiler=SimpleProfiler())
    resumed.fit(Regressor(), datamodule=data, ckpt_path="last")
    assert data.restored == {"seen": 1} and len(_durations(resumed)["[DataModule]Data.load_state_dict"]) == 1


def test_a_hook_set_on_the_instance_is_timed_and_put_back(tmp_path) -> None:
    data = Data()
    own = data.val_dataloader
    data.val_dataloader = own  # an instance attribute, as DataModule.from_datasets sets
    t = trainer(tmp_path, max_epochs=1, profiler="simple", enable_checkpointing=False)
    t.fit(Regressor(), datamodule=data)
    assert len(_durations(t)["[DataModule]Data.val_dataloader"]) == 1
    assert vars(data)["val_dataloader"] is own


def test_a_failing_run_gives_the_hooks_back_too(tmp_path) -> None:
    class Broken(Data):
        def setup(self, stage: str) -> None:
            raise RuntimeError("no data today")

    data = Broken()
    with pytest.raises(RuntimeError, match="no data today"):
        trainer(tmp_path, max_epochs=1, profiler="simple").fit(Regressor(), datamodule=data)
    assert not {"setup", "prepare_data", "train_dataloader"} & set(vars(data))


def test_without_a_recording_profiler_nothing_is_wrapped(tmp_path) -> None:
    data = Data()
    t = trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
    t.profiler = PassThroughProfiler()
    t.profiler.watch(data, DataModule)
    assert not {"setup", "prepare_data"} & set(vars(data))


def test_lightnings_module_paths_give_the_same_classes() -> None:
    assert (SimpleProfiler, AdvancedProfiler, PassThroughProfiler) == (
        profilers.SimpleProfiler, profilers.AdvancedProfiler, profilers.PassThroughProfiler)
    assert issubclass(SimpleProfiler, Profiler)


@pytest.mark.parametrize("key", ["row_limit", "sort_by", "self", "not_an_argument"])
def test_a_bad_table_kwarg_is_a_value_error_and_a_key_error(key: str) -> None:
    for kind in (ValueError, KeyError, TableKwargsError):
        with pytest.raises(kind, match=rf"PyTorchProfiler\(table_kwargs=...\): \['{key}'\] are not arguments"):
            PyTorchProfiler(table_kwargs={key: None})
