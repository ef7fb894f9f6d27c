"""The dict ``on_save_checkpoint`` / ``on_load_checkpoint`` get (``stoker/trainer/hook_checkpoint.py``): Lightning's
keys, the states as read-only views that are never stored, and the Trainer's bookkeeping kept out of it."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import stoker
from stoker.callbacks import Callback, ModelCheckpoint
from stoker.trainer.loading import trainer_checkpoint, trainer_own
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer

LIGHTNING_KEYS = {"epoch", "global_step", "pytorch-lightning_version", "state_dict", "loops", "callbacks",
                  "optimizer_states", "lr_schedulers"}


class Seeing(Regressor):
    """Records the keys and views its checkpoint hooks see, and adds an entry of its own."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seen: dict[str, Any] = {}

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.seen["save_keys"] = set(checkpoint)
        self.seen["save_weights"] = {k: v.clone() for k, v in checkpoint["state_dict"].items()}
        self.seen["save_lr"] = checkpoint["lr_schedulers"][0]["_last_lr"]
        self.seen["save_momentum"] = len(checkpoint["optimizer_states"][0]["state"])
        with pytest.raises(TypeError, match=r"checkpoint\['state_dict'\] is read-only"):
            checkpoint["state_dict"]["net.0.weight"] = torch.zeros(1)
        checkpoint["mine"] = {"note": 7}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.seen["load_keys"] = set(checkpoint)
        self.seen["load_weights"] = {k: v.clone() for k, v in checkpoint["state_dict"].items()}
        self.seen["load_mine"] = checkpoint.get("mine")


def fit(root: Any, module: Regressor, ckpt_path: str | None = None, **kw: Any) -> stoker.Trainer:
    trainer = quiet_trainer(default_root_dir=str(root), enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(save_last=True)], **kw)
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8), ckpt_path=ckpt_path)
    return trainer


def test_the_hooks_get_lightnings_keys_and_the_states_as_they_are_saved(tmp_path: Any) -> None:
    module = Seeing()
    fit(tmp_path, module, max_epochs=1)
    assert module.seen["save_keys"] == LIGHTNING_KEYS | {"hyper_parameters"}  # Regressor saves its arguments
    assert module.seen["save_lr"] == [0.05] and module.seen["save_momentum"] == 4  # stepped once; momentum buffers
    for name, value in module.state_dict().items():
        assert torch.equal(module.seen["save_weights"][name], value)
    payload = trainer_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    checkpoint, own = trainer_own(payload)
    assert not ({"state_dict", "optimizer_states", "lr_schedulers", "pytorch-lightning_version"} & set(checkpoint))
    assert checkpoint["mine"] == {"note": 7} and set(own) >= {"results", "callback_metrics"}

    resumed = Seeing()
    fit(tmp_path / "again", resumed, max_epochs=2, ckpt_path=os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    assert resumed.seen["load_keys"] >= LIGHTNING_KEYS | {"mine"} and resumed.seen["load_mine"] == {"note": 7}
    assert "results" not in resumed.seen["load_keys"]  # the Trainer's bookkeeping is not the hooks' business
    for name, value in module.state_dict().items():  # the weights loaded for the resume, seen by the hook
        assert torch.equal(resumed.seen["load_weights"][name], value)


def test_a_hook_that_removes_a_state_is_warned_that_nothing_changes(tmp_path: Any) -> None:
    class Dropping(Callback):
        def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
            del checkpoint["optimizer_states"]

    with pytest.warns(UserWarning, match=r"removed or replaced checkpoint\['optimizer_states'\].*save_weights_only"):
        trainer = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=1, callbacks=[Dropping()])
        trainer.fit(Regressor(), make_loader(make_regression_data(n=16), batch_size=8))
        trainer.save_checkpoint(tmp_path / "manual.ckpt")


def test_a_checkpoint_with_the_bookkeeping_inside_still_reads(tmp_path: Any) -> None:
    # Checkpoints written before the bookkeeping moved beside the hooks' dict kept it inside.
    old = {"format": "stoker-trainer", "version": 1, "logger_runs": [],
           "checkpoint": {"epoch": 1, "global_step": 4, "results": {"a": 1}, "other_schedulers": [],
                          "hyper_parameters": {"lr": 0.1}, "hyper_parameters_not_stored": ["f"]}}
    checkpoint, own = trainer_own(old)
    assert checkpoint == {"epoch": 1, "global_step": 4, "hyper_parameters": {"lr": 0.1}}
    assert own == {"results": {"a": 1}, "other_schedulers": [], "hyper_parameters_not_stored": ["f"]}


class Counting(Callback):
    """Counts its training batches (its state); records in ``calls`` the count each load hook found."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.batches, self.calls = 0, calls

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls.append(("load_state_dict", self.batches))
        self.batches = state["batches"]

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        self.calls.append(("on_load_checkpoint", self.batches))


def test_a_callbacks_load_hook_runs_before_its_state_is_loaded(tmp_path: Any) -> None:
    """Lightning's order on resume: a callback's ``on_load_checkpoint`` sees the checkpoint before its
    ``load_state_dict`` brings the state back (so the hook can prepare for, or adapt, that state)."""
    calls: list[tuple[str, Any]] = []
    data = make_loader(make_regression_data(n=16))
    first = quiet_trainer(max_epochs=1, default_root_dir=tmp_path, callbacks=[Counting(calls)])
    first.fit(Regressor(), data)
    path = os.path.join(tmp_path, "one.ckpt")
    first.save_checkpoint(path)
    second = Counting(calls)
    quiet_trainer(max_epochs=2, default_root_dir=tmp_path, callbacks=[second]).fit(Regressor(), data, ckpt_path=path)
    assert calls == [("on_load_checkpoint", 0), ("load_state_dict", 0)] and second.batches == 4


def test_a_resume_restores_the_hooks_and_callbacks_before_configure_optimizers(tmp_path: Any) -> None:
    """Lightning's order: ``on_load_checkpoint`` (module, then callbacks) and the callbacks' states come before
    ``configure_optimizers``, so it may build the optimizers from what they restored; the hook reads the saved
    weights and optimizer states from the folder (nothing is loaded into the objects yet)."""
    calls: list[str] = []

    class Order(Callback):
        def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
            calls.append("Callback.on_load_checkpoint")

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            calls.append("Callback.load_state_dict")

        def state_dict(self) -> dict[str, Any]:
            return {"kept": True}

    class Restoring(Seeing):
        def __init__(self) -> None:
            super().__init__()
            self.lr = 0.1

        def configure_optimizers(self) -> Any:
            calls.append(f"configure_optimizers lr={self.lr}")
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["lr"] = 0.02

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            calls.append("on_load_checkpoint")
            self.lr = checkpoint["lr"]
            self.seen["momentum"] = len(checkpoint["optimizer_states"][0]["state"])
            self.seen["load_weights"] = {k: v.clone() for k, v in checkpoint["state_dict"].items()}

    first = Restoring()
    trainer = quiet_trainer(default_root_dir=str(tmp_path), enable_checkpointing=True, max_epochs=1,
                            callbacks=[ModelCheckpoint(save_last=True), Order()])
    trainer.fit(first, make_loader(make_regression_data(n=32), batch_size=8))
    calls.clear()
    resumed = Restoring()
    trainer = quiet_trainer(default_root_dir=str(tmp_path / "again"), enable_checkpointing=True, max_epochs=2,
                            callbacks=[ModelCheckpoint(save_last=True), Order()])
    trainer.fit(resumed, make_loader(make_regression_data(n=32), batch_size=8),
                ckpt_path=os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    assert calls[:4] == ["on_load_checkpoint", "Callback.on_load_checkpoint", "Callback.load_state_dict",
                         "configure_optimizers lr=0.02"]
    assert resumed.seen["momentum"] == 4  # the saved optimizer's buffers, read from the folder
    for name, value in first.state_dict().items():
        assert torch.equal(resumed.seen["load_weights"][name], value)


def test_a_sharded_checkpoints_weights_are_an_error_that_says_where_to_read_them(tmp_path: Any,
                                                                                monkeypatch: Any) -> None:
    """Before the fit loads them, a sharded (FSDP) checkpoint's weights cannot be read by one process: the view says
    so when a hook looks at it (and costs nothing when none does)."""
    import stoker.accelerator
    from stoker.trainer.checkpoint_dict import folder_states

    monkeypatch.setattr(stoker.accelerator, "verify_checkpoint",
                        lambda folder, files=None: {"files": ["__0_0.distcp", "optimizer.safetensors"]})
    state_dict, optimizer_states, schedulers = folder_states(str(tmp_path))  # nothing read yet
    assert len(optimizer_states) == 1 and schedulers == []
    with pytest.raises(ValueError, match=r"sharded \(FSDP\).*on_fit_start"):
        dict(state_dict)


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_an_evaluation_from_a_checkpoint_restores_the_hooks_and_callbacks_then_the_weights(tmp_path: Any,
                                                                                          fn: str) -> None:
    """Lightning's restore before ``validate``/``test``/``predict(ckpt_path=...)``: the module's
    ``on_load_checkpoint`` (which reads what its ``on_save_checkpoint`` added, e.g. state that is not a weight) and
    the callbacks' ``on_load_checkpoint`` and ``load_state_dict`` run, before the weights load."""
    calls: list[tuple[str, Any]] = []

    class Labelled(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.labels: list[str] = []

        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return self(batch[0])

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["labels"] = ["a", "b"]

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            weight = next(self.parameters())
            calls.append(("module.on_load_checkpoint", torch.equal(weight, checkpoint["state_dict"]["net.0.weight"])))
            self.labels = list(checkpoint["labels"])

    data = make_loader(make_regression_data(n=16), batch_size=4)
    trained = Labelled()
    trainer = quiet_trainer(max_epochs=1, default_root_dir=str(tmp_path), callbacks=[Counting(calls)])
    trainer.fit(trained, data)
    path = os.path.join(tmp_path, "one.ckpt")
    trainer.save_checkpoint(path)
    fresh, note = Labelled(), Counting(calls)
    getattr(quiet_trainer(default_root_dir=str(tmp_path), callbacks=[note]), fn)(fresh, data, ckpt_path=path)
    assert calls == [("module.on_load_checkpoint", False), ("on_load_checkpoint", 0),
                     ("load_state_dict", 0)]  # the module's hook ran before the weights loaded
    assert fresh.labels == ["a", "b"] and note.batches == 4
    for name, value in trained.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value)


def test_an_evaluation_loads_the_weights_as_strictly_as_the_module_says(tmp_path: Any) -> None:
    """A module whose keys differ from the checkpoint's is an error that names them, and is left as it was (it used
    to evaluate with the keys that matched, the others as initialized); ``strict_loading = False`` loads the keys
    that match, as in Lightning."""
    from stoker.accelerator import MismatchedKeysError

    class Wider(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.extra = torch.nn.Linear(2, 2)

    data = make_loader(make_regression_data(n=16), batch_size=4)
    trainer = quiet_trainer(max_epochs=1, default_root_dir=str(tmp_path))
    trained = Regressor()
    trainer.fit(trained, data)
    path = os.path.join(tmp_path, "one.ckpt")
    trainer.save_checkpoint(path)
    wider = Wider()
    before = {k: v.clone() for k, v in wider.state_dict().items()}
    with pytest.raises(MismatchedKeysError, match=r"missing keys \['extra.bias', 'extra.weight'\].*strict_loading"):
        quiet_trainer(default_root_dir=str(tmp_path)).validate(wider, data, ckpt_path=path)
    assert all(torch.equal(v, before[k]) for k, v in wider.state_dict().items())
    wider.strict_loading = False
    quiet_trainer(default_root_dir=str(tmp_path)).validate(wider, data, ckpt_path=path)
    assert torch.equal(wider.extra.weight, before["extra.weight"])
    assert all(torch.equal(wider.state_dict()[k], v) for k, v in trained.state_dict().items())
