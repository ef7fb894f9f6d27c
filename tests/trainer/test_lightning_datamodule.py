"""datamodule= on fit/validate/test/predict and ckpt_path='best' (issue 14 items 1 and 4)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from stoker import DataModule, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.weights import params_of


class Data(DataModule):
    def __init__(self, n: int = 32, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.calls: list[str] = []
        self.counter = 0

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        self.data = make_regression_data(n=self.hparams.n)

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{stage}")

    def train_dataloader(self) -> Any:
        self.counter += 1
        return make_loader(self.data, batch_size=self.hparams.batch_size)

    def val_dataloader(self) -> Any:
        return make_loader(self.data, batch_size=self.hparams.batch_size)

    test_dataloader = predict_dataloader = val_dataloader

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counter = state["counter"] + 100


class Predicting(Regressor):
    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def quiet(root: Any, **kwargs: Any) -> Trainer:
    return Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                   **kwargs)


def test_datamodule_hooks_run_in_order_on_every_entry_point(tmp_path: Any) -> None:
    dm, module = Data(), Predicting()
    trainer = quiet(tmp_path, max_epochs=2)
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 8 and trainer.datamodule is dm and dm.trainer is trainer
    assert dm.calls == ["prepare_data", "setup:fit", "teardown:fit"]
    assert trainer.validate(module, datamodule=dm)[0]["val/loss"] >= 0
    assert len(trainer.test(module, datamodule=dm)) == 1
    assert len(trainer.predict(module, datamodule=dm)) == 4
    assert dm.calls[3:] == ["prepare_data", "setup:validate", "teardown:validate", "prepare_data", "setup:test",
                            "teardown:test", "prepare_data", "setup:predict", "teardown:predict"]


def test_datamodule_in_the_loaders_place_and_errors(tmp_path: Any) -> None:
    dm = Data()
    trainer = quiet(tmp_path, max_epochs=1, enable_checkpointing=False)
    trainer.fit(Regressor(), dm)  # Lightning accepts trainer.fit(model, dm)
    assert trainer.global_step == 4
    loader = make_loader(make_regression_data(n=16), batch_size=8)
    with pytest.raises(ValueError, match="both dataloaders and datamodule"):
        trainer.test(Regressor(), loader, datamodule=dm)
    with pytest.raises(ValueError, match="both val_dataloaders and datamodule"):
        trainer.fit(Regressor(), val_dataloaders=loader, datamodule=dm)
    with pytest.raises(TypeError, match="expected a stoker.DataModule"):
        trainer.fit(Regressor(), datamodule=loader)


def test_teardown_runs_after_an_exception(tmp_path: Any) -> None:
    class Broken(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise RuntimeError("boom")

    dm = Data()
    with pytest.raises(RuntimeError, match="boom"):
        quiet(tmp_path, max_epochs=1).fit(Broken(), datamodule=dm)
    assert dm.calls[-1] == "teardown:fit"


def test_datamodule_state_is_saved_and_restored(tmp_path: Any) -> None:
    dm = Data()
    trainer = quiet(tmp_path, max_epochs=1)
    trainer.fit(Regressor(), datamodule=dm)
    last = os.path.join(tmp_path, "checkpoints", "epoch=1-step=8.ckpt")  # the resumed fit's epoch checkpoint
    resumed, trainer = Data(), quiet(tmp_path, max_epochs=2)
    trainer.fit(Regressor(), datamodule=resumed, ckpt_path="last")
    # Lightning's order: the data module's state comes back before its train_dataloader is asked for (so the loader
    # may be built from it): the saved 1, + 100 by load_state_dict, + 1 by the request
    assert resumed.counter == 1 + 100 + 1 and trainer.global_step == 8 and os.path.isdir(last)


def test_ckpt_path_best_and_best_model_score(tmp_path: Any) -> None:
    from stoker.callbacks import ModelCheckpoint

    class Scored(Regressor):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", torch.tensor([3.0, 1.0, 2.0])[self.current_epoch])  # best (min) after epoch 1

    ckpt = ModelCheckpoint(monitor="score", save_top_k=1)
    module = Scored()
    trainer = quiet(tmp_path, max_epochs=3, callbacks=[ckpt])
    trainer.fit(module, datamodule=Data())
    assert ckpt.best_model_score == 1.0 and isinstance(ckpt.best_model_score, float)
    assert os.path.basename(trainer.checkpoint_callback.best_model_path) == "epoch=1-step=8.ckpt"
    trained = params_of(module)
    trainer.test(module, datamodule=Data(), ckpt_path="best")  # weights of epoch 1 come back
    assert any(not torch.equal(a, b) for a, b in zip(trained, module.parameters()))
    again = quiet(tmp_path, max_epochs=3, callbacks=[ModelCheckpoint(monitor="score", save_top_k=1)])
    with pytest.raises(ValueError, match="no best checkpoint yet"):
        again.validate(Scored(), datamodule=Data(), ckpt_path="best")
    with pytest.raises(ValueError, match="needs a ModelCheckpoint"):
        quiet(tmp_path, enable_checkpointing=False).predict(Predicting(), datamodule=Data(), ckpt_path="best")
    assert ModelCheckpoint().best_model_score is None


def test_lightning_keywords_of_the_entry_points(tmp_path: Any, capsys: Any) -> None:
    dm, module = Data(), Predicting()
    trainer = quiet(tmp_path, max_epochs=1)
    trainer.fit(model=module, datamodule=dm)  # Lightning's keyword for the module
    assert trainer.global_step == 4
    capsys.readouterr()
    results = trainer.test(model=module, datamodule=dm, verbose=True)
    out = capsys.readouterr().out
    assert "test metrics" in out and "test/loss" in out and f"{results[0]['test/loss']:.6g}" in out
    trainer.validate(module, datamodule=dm, verbose=False)
    assert capsys.readouterr().out == ""  # stoker's default is quiet
    assert trainer.predict(module, datamodule=dm, return_predictions=False) is None
    with pytest.raises(TypeError, match="both module and model="):
        trainer.fit(module, model=module, datamodule=dm)
    with pytest.raises(TypeError, match="needs the TrainingModule"):
        trainer.fit(datamodule=dm)


def test_fit_resumes_from_the_best_checkpoint(tmp_path: Any) -> None:
    from stoker.callbacks import ModelCheckpoint

    class Scored(Regressor):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", torch.tensor([3.0, 1.0, 2.0, 5.0])[self.current_epoch])

    ckpt = ModelCheckpoint(monitor="score", save_top_k=1)
    trainer = quiet(tmp_path, max_epochs=3, callbacks=[ckpt])
    trainer.fit(Scored(), datamodule=Data())
    trainer.max_epochs = 4
    trainer.fit(Scored(), datamodule=Data(), ckpt_path="best")  # back to the end of epoch 1, then epochs 2 and 3
    assert trainer.global_step == 16 and trainer.current_epoch == 4
