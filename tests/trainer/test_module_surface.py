"""The Lightning-shaped module surface: configure_callbacks, example_input_array, on_before_zero_grad, freeze,
logger/loggers, and validation/test steps over several loaders."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.nn import functional as F

import stoker.callbacks.base
import stoker.trainer.hooks
from stoker import Callback, Trainer, TrainingModule
from stoker.callbacks import ModelCheckpoint, ModelSummary
from stoker.callbacks.base import CALLBACK_ONLY_HOOKS
from stoker.trainer.hooks import HOOKS
from stoker.trainer.mode_hooks import MODE_HOOKS
from stoker.trainer.step_hooks import STEP_HOOKS_ON
from tests.helpers.models import Regressor, make_loader, make_regression_data


def quiet(tmp_path: Any, **kwargs: Any) -> Trainer:
    kwargs.setdefault("logger", False)
    return Trainer(max_epochs=1, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                   **kwargs)


def loader(n: int = 16) -> Any:
    return make_loader(make_regression_data(n=n), batch_size=8)


class Marker(Callback):
    def __init__(self, tag: str) -> None:
        self.tag = tag


def test_configure_callbacks_merges_and_replaces_by_type(tmp_path: Any) -> None:
    own = ModelCheckpoint(dirpath=tmp_path / "own", save_last=True)

    class WithCallbacks(Regressor):
        def configure_callbacks(self) -> Any:
            return [own, Marker("module")]

    trainer = quiet(tmp_path, callbacks=[Marker("trainer"), ModelCheckpoint()])
    trainer.fit(WithCallbacks(), loader())
    checkpoints = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert checkpoints == [own] and trainer.callbacks[-1] is own  # replaced the Trainer's; checkpoints go last
    assert [c.tag for c in trainer.callbacks if isinstance(c, Marker)] == ["module"]
    assert (tmp_path / "own" / "last.ckpt").is_dir() and not (tmp_path / "checkpoints").exists()


def test_configure_callbacks_may_return_one_callback(tmp_path: Any) -> None:
    seen: list[int] = []

    class Counting(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append(batch_idx)

    class WithOne(Regressor):
        def configure_callbacks(self) -> Any:
            return Counting()

    quiet(tmp_path, enable_checkpointing=False).fit(WithOne(), loader())
    assert seen == [0, 1]


def test_example_input_array_gives_the_summary_sizes(tmp_path: Any, capsys: Any) -> None:
    module = Regressor()
    assert module.example_input_array is None
    module.example_input_array = torch.zeros(4, 8)
    Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
            default_root_dir=tmp_path, callbacks=[ModelSummary()]).fit(module, loader())
    out = capsys.readouterr().out
    assert "In sizes" in out and "[4, 8]" in out and "[4, 2]" in out


def test_hook_names_agree_everywhere() -> None:
    def hooks_of(cls: type) -> set[str]:
        return {n for n, _ in inspect.getmembers(cls, inspect.isfunction)
                if n.startswith("on_") or n in ("setup", "teardown")}

    assert len(HOOKS) == len(set(HOOKS)) == 37 and HOOKS[:2] == ("setup", "teardown")
    assert "on_before_zero_grad" in HOOKS and "state_dict" not in HOOKS and "configure_callbacks" not in HOOKS
    assert all(h.startswith("on_") for h in HOOKS[2:])
    # The module also has Lightning's module-only hooks around evaluation's mode switch (mode_hooks.py) and around
    # a batch's transfer and the optimizer step (step_hooks.py).
    assert hooks_of(Callback) == set(HOOKS)
    assert hooks_of(TrainingModule) == set(HOOKS) - set(CALLBACK_ONLY_HOOKS) | set(MODE_HOOKS) | set(STEP_HOOKS_ON)
    assert stoker.trainer.hooks.HOOKS is stoker.callbacks.base.HOOKS  # one list, read off Callback


def test_module_hook_signatures_are_the_callback_ones_without_trainer_and_module() -> None:
    for name in set(HOOKS) - set(CALLBACK_ONLY_HOOKS):
        on_callback = list(inspect.signature(getattr(Callback, name)).parameters.values())
        on_module = list(inspect.signature(getattr(TrainingModule, name)).parameters.values())
        assert [p.name for p in on_callback[:3]] == ["self", "trainer", "module"], name
        expected = [(p.name, p.kind, p.default) for p in on_callback[3:]]
        assert [(p.name, p.kind, p.default) for p in on_module[1:]] == expected, name


def test_a_method_added_to_callback_is_a_hook_everywhere() -> None:
    class Extended(Callback):
        def on_new_event(self, trainer: Any, module: Any) -> None:
            """A hook written once, as a method."""

        def _helper(self) -> None:
            """Private: not a hook."""

    names = stoker.callbacks.base._hook_names(Extended)
    assert names == ("on_new_event",)  # public methods only; state methods are listed in NOT_HOOKS
    assert stoker.callbacks.base._hook_names(Callback) == HOOKS
    assert {"state_dict", "load_state_dict"} <= stoker.callbacks.base.NOT_HOOKS


def test_on_before_zero_grad_gets_each_optimizer(tmp_path: Any) -> None:
    class Zeroing(Regressor):
        def on_before_zero_grad(self, optimizer: Any) -> None:
            self.zeroed.append((optimizer, self.global_step))

    module = Zeroing()
    module.zeroed = []
    trainer = quiet(tmp_path, enable_checkpointing=False)
    trainer.fit(module, loader())
    # Lightning's place: at each window's first batch, before its backward (so before the step that follows)
    assert [s for _, s in module.zeroed] == [0, 1]
    assert all(opt is trainer.optimizers[0] for opt, _ in module.zeroed)


def test_freeze_and_unfreeze() -> None:
    module = Regressor()
    module.freeze()
    assert not any(p.requires_grad for p in module.parameters()) and not module.training
    module.unfreeze()
    assert all(p.requires_grad for p in module.parameters()) and module.training


def test_logger_and_loggers(tmp_path: Any) -> None:
    class Looking(Regressor):
        def on_train_start(self) -> None:
            self.found = (self.logger, self.loggers)

    module = Looking()
    assert module.logger is None and module.loggers == []
    trainer = quiet(tmp_path, logger=["csv", "tensorboard"], enable_checkpointing=False)
    trainer.fit(module, loader())
    assert module.found[0] is trainer.logger and module.found[1] == trainer.loggers and len(trainer.loggers) == 2


class SeveralLoaders(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = -1) -> None:
        self.calls.append(("val", batch_idx, dataloader_idx))
        x, y = batch
        self.log("val/loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int, *rest: int) -> None:
        self.calls.append(("test", batch_idx, *rest))
        x, y = batch
        self.log("test/loss", F.mse_loss(self(x), y) * (1 + len(rest)))


def test_validation_and_test_steps_over_several_loaders(tmp_path: Any) -> None:
    module = SeveralLoaders()
    trainer = quiet(tmp_path, enable_checkpointing=False)
    results = trainer.validate(module, [loader(16), loader(8)])
    assert module.calls == [("val", 0, 0), ("val", 1, 0), ("val", 0, 1)]
    assert [sorted(r) for r in results] == [["val/loss/dataloader_idx_0"], ["val/loss/dataloader_idx_1"]]
    module.calls.clear()
    single = trainer.test(module, loader(8))  # one loader: no dataloader_idx argument, no suffix
    assert module.calls == [("test", 0)] and list(single[0]) == ["test/loss"]
    module.calls.clear()
    trainer.test(module, [loader(8), loader(8)])
    assert module.calls == [("test", 0, 0), ("test", 0, 1)]
    assert "test/loss/dataloader_idx_1" in trainer.callback_metrics


def test_freeze_and_unfreeze_return_the_module_for_chaining() -> None:
    module = Regressor()
    assert module.freeze() is module and not module.training
    assert module.unfreeze() is module and module.training


def test_dtype_on_gpu_and_all_gather_in_one_process(tmp_path: Any) -> None:
    import collections

    import pytest

    seen: dict[str, Any] = {}
    Pair = collections.namedtuple("Pair", "a b")

    class Gathering(Regressor):
        def on_train_start(self) -> None:
            loss = torch.tensor([1.0, 2.0])
            seen["tensor"] = self.all_gather(loss)
            seen["mixed"] = self.all_gather({"n": 3, "pair": Pair(torch.ones(2), 0.5), "items": [1.5, "text"]})
            with pytest.raises(ValueError, match="gathers over all the run's processes"):
                self.all_gather(loss, group=object())

    module = Gathering()
    assert module.dtype == torch.float32 and not module.on_gpu
    quiet(tmp_path).fit(module, loader())
    assert torch.equal(seen["tensor"], torch.tensor([1.0, 2.0]))  # one process: as it is, no new dimension
    mixed = seen["mixed"]
    assert torch.equal(mixed["n"], torch.tensor(3)) and isinstance(mixed["pair"], Pair)
    assert torch.equal(mixed["pair"].b, torch.tensor(0.5)) and mixed["items"][1] == "text"
    assert module.double().dtype == torch.float64
