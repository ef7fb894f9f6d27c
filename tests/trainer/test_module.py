"""TrainingModule conveniences, Trainer attributes seen from hooks, and callback state in checkpoints."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import stoker.trainer
from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer as bare


class Inspecting(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        t = self.trainer
        self.seen.append((self.global_step, self.current_epoch, self.device.type, t.training, t.state.fn))
        self.print(f"step {self.global_step}")
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen.append(("val", self.trainer.validating, self.trainer.training, self.trainer.sanity_checking))


def test_properties_inside_steps(capsys: pytest.CaptureFixture) -> None:
    module = Inspecting()
    assert (module.global_step, module.current_epoch, module.device.type) == (0, 0, "cpu")
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        module.trainer
    trainer = bare(max_epochs=2, accumulate=2, num_sanity_val_steps=0)
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8),
                make_loader(make_regression_data(n=8), batch_size=8))
    train = [s for s in module.seen if s[0] != "val"]
    assert [s[:2] for s in train] == [(0, 0), (0, 0), (1, 0), (1, 0), (2, 1), (2, 1), (3, 1), (3, 1)]
    assert {s[2:] for s in train} == {("cpu", True, "fit")}
    assert {s for s in module.seen if s[0] == "val"} == {("val", True, False, False)}
    assert capsys.readouterr().out.count("step ") == 8
    assert trainer.module is trainer.lightning_module is module and trainer.state.fn is None
    assert copy.deepcopy(module)._trainer is None  # a copy does not drag the Trainer along


def test_ranks_are_the_attached_trainers_published_ones() -> None:
    module = Regressor()
    assert (module.global_rank, module.local_rank) == (0, 0)  # no Trainer: a single process
    core = stoker.trainer.Trainer(logger=False, enable_progress_bar=False)
    assert (core.global_rank, core.local_rank) == (0, 0)  # the core Trainer publishes them, not only stoker.Trainer
    module.trainer = SimpleNamespace(global_rank=3, local_rank=1)  # anything that publishes them: a launcher's view
    assert (module.global_rank, module.local_rank) == (3, 1)


class Counter(Callback):
    def __init__(self, key: str = "counter") -> None:
        self.key, self.batches, self.loaded = key, 0, None

    @property
    def state_key(self) -> str:
        return self.key

    def on_train_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        self.batches += 1

    def state_dict(self) -> dict:
        return {"batches": self.batches, "tensor": torch.tensor([self.batches])}

    def load_state_dict(self, state: dict) -> None:
        self.loaded = state
        self.batches = state["batches"]


def test_callback_state_is_saved_and_restored_by_state_key(tmp_path: Any) -> None:
    loader = make_loader(make_regression_data(n=24), batch_size=8)
    first = Counter()
    trainer = bare(max_epochs=1, callbacks=[first, Counter("other")])
    trainer.fit(Regressor(), loader)
    trainer.save_checkpoint(tmp_path / "ck")
    again, other = Counter(), Counter("other")
    other.batches = 100  # restored too, by its own key
    resumed = bare(max_epochs=2, callbacks=[again, other])
    resumed.fit(Regressor(), loader, ckpt_path=tmp_path / "ck")
    assert again.loaded["batches"] == 3 and again.loaded["tensor"].tolist() == [3]
    assert (again.batches, other.batches) == (6, 6)


def test_duplicate_state_keys_are_an_error() -> None:
    with pytest.raises(ValueError, match=r"several callbacks with state_key \['counter'\]"):
        Trainer(callbacks=[Counter(), Counter()])


def test_default_callbacks_and_loggers(tmp_path: Any) -> None:
    from stoker import ModelCheckpoint, ModelSummary, ProgressBar, TensorBoardLogger

    trainer = Trainer(default_root_dir=str(tmp_path))
    # Lightning's order: the checkpoint callback last
    assert [type(c) for c in trainer.callbacks] == [ProgressBar, ModelSummary, ModelCheckpoint]
    assert trainer.checkpoint_callback is trainer.callbacks[2]
    assert isinstance(trainer.logger, TensorBoardLogger) and trainer.log_dir.startswith(str(tmp_path))
    mine = ModelCheckpoint(dirpath=str(tmp_path / "mine"))
    trainer = Trainer(callbacks=[mine], enable_progress_bar=False, logger=False, enable_model_summary=False)
    assert trainer.callbacks == [mine] and trainer.loggers == [] and trainer.logger is None
    assert trainer.log_dir == trainer.default_root_dir


def test_checkpoint_callbacks_go_last_in_their_own_order(tmp_path: Any) -> None:
    from stoker import EarlyStopping, ModelCheckpoint, Timer

    first, second = ModelCheckpoint(dirpath=str(tmp_path / "a")), ModelCheckpoint(str(tmp_path / "b"), monitor="loss")
    stop, timer = EarlyStopping("loss"), Timer()
    trainer = Trainer(callbacks=[first, stop, second, timer], enable_progress_bar=False, logger=False,
                      enable_model_summary=False)
    assert trainer.callbacks == [stop, timer, first, second] and trainer.checkpoint_callback is first


def test_deterministic_turns_on_torch_deterministic_algorithms() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    try:
        bare(max_steps=1, seed=0, deterministic=True).fit(Regressor(), make_loader(make_regression_data(n=8)))
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


def test_state_keys_follow_lightning_and_checkpoints_with_the_earlier_sorted_keys_still_restore(tmp_path: Any) -> None:
    from stoker import EarlyStopping, ModelCheckpoint
    from stoker.trainer.checkpointing import same_key as _same_key

    assert EarlyStopping(monitor="val_loss").state_key == "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}"
    assert ModelCheckpoint(monitor="val_loss").state_key == (
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
        "'train_time_interval': None}")
    earlier = "ModelCheckpoint{'every_n_epochs': 1, 'every_n_train_steps': 0, 'mode': 'min', 'monitor': 'val_loss'}"
    assert _same_key(earlier) == _same_key(ModelCheckpoint(monitor="val_loss").state_key)
    assert _same_key("EarlyStopping{'mode': 'min', 'monitor': 'val_loss'}") == _same_key(
        EarlyStopping(monitor="val_loss").state_key)
    assert _same_key("counter") == "counter"
