"""TrainingModule.load_from_checkpoint: checkpoint folders, exported weights, overrides and the errors."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch
from torch import nn

from stoker import Accelerator, DataModule, Trainer, TrainingModule
from stoker.callbacks import ModelCheckpoint
from tests.helpers.models import Regressor, make_loader, make_mlp, make_regression_data
from tests.helpers.weights import assert_same_weights


def train(tmp_path: Any, module: TrainingModule, **checkpoint: Any) -> Trainer:
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path, callbacks=[ModelCheckpoint(save_last=True, **checkpoint)])
    trainer.fit(module, make_loader(make_regression_data(n=32)))
    return trainer


def test_checkpoint_folder_rebuilds_hparams_and_weights(tmp_path: Any) -> None:
    trained = Regressor(lr=0.1, momentum=0.5, seed=3)
    train(tmp_path, trained)
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    loaded = Regressor.load_from_checkpoint(path)
    assert type(loaded) is Regressor and loaded.hparams.lr == 0.1 and loaded.hparams.seed == 3
    assert_same_weights(loaded, trained)
    assert not torch.equal(loaded.net[0].weight, make_mlp(seed=3)[0].weight)  # trained weights, not a fresh init
    again = Regressor.load_from_checkpoint(path, lr=0.5, map_location="cpu")  # overrides win
    assert again.hparams.lr == 0.5 and again.hparams.momentum == 0.5
    assert_same_weights(again, trained)


def test_on_load_checkpoint_sees_the_trainer_checkpoint(tmp_path: Any) -> None:
    class Noting(Regressor):
        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.noted = (checkpoint["global_step"], checkpoint["hyper_parameters"]["lr"])

    train(tmp_path, Noting(lr=0.2))
    loaded = Noting.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    assert loaded.noted == (4, 0.2)


@pytest.mark.parametrize("option", ["export_weights", "save_weights_only"])
def test_exported_weights_carry_hparams(tmp_path: Any, option: str) -> None:
    trained = Regressor(lr=0.2, seed=4)
    train(tmp_path, trained, **{option: True})
    folder = os.path.join(tmp_path, "checkpoints", "weights", "last.ckpt") if option == "export_weights" \
        else os.path.join(tmp_path, "checkpoints", "last.ckpt")
    with open(os.path.join(folder, "hparams.json"), encoding="utf-8") as f:
        assert json.load(f)["hyper_parameters"]["lr"] == 0.2
    for path in (folder, os.path.join(folder, "model.safetensors")):
        loaded = Regressor.load_from_checkpoint(path)
        assert loaded.hparams.lr == 0.2 and loaded.hparams.seed == 4
        assert_same_weights(loaded, trained)


class NeedsWidth(TrainingModule):
    def __init__(self, width: int, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = backbone if backbone is not None else nn.Linear(width, 1)


def test_weights_without_hparams_need_the_constructor_arguments(tmp_path: Any) -> None:
    module = NeedsWidth(3)
    Accelerator(cpu=True).save_model(module, tmp_path / "plain")  # save_model alone writes no hparams.json
    with pytest.raises(ValueError, match=r"needs \['width'\].*no hyperparameters.*width=\.\.\."):
        NeedsWidth.load_from_checkpoint(tmp_path / "plain")
    assert_same_weights(NeedsWidth.load_from_checkpoint(tmp_path / "plain", width=3), module)


def test_hparams_a_checkpoint_cannot_hold_must_be_passed_again(tmp_path: Any) -> None:
    from stoker.trainer.loading import write_hparams

    module = NeedsWidth(2, backbone=nn.Linear(2, 1))
    Accelerator(cpu=True).save_model(module, tmp_path / "w")
    write_hparams(module, tmp_path / "w")
    with pytest.raises(ValueError, match=r"\['backbone'\] could not be saved.*backbone=\.\.\."):
        NeedsWidth.load_from_checkpoint(tmp_path / "w")
    loaded = NeedsWidth.load_from_checkpoint(tmp_path / "w", backbone=nn.Linear(2, 1))
    assert_same_weights(loaded, module)


def test_unusable_paths_and_mismatched_weights(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="nothing at"):
        Regressor.load_from_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder"):
        Regressor.load_from_checkpoint(tmp_path / "empty")
    with pytest.raises(TypeError, match="map_location"):
        Regressor.load_from_checkpoint(tmp_path / "empty", map_location=3.5)
    Accelerator(cpu=True).save_model(NeedsWidth(3), tmp_path / "other")
    with pytest.raises(Exception, match="missing keys"):
        Regressor.load_from_checkpoint(tmp_path / "other")


def test_strict_false_loads_the_matching_layers_of_a_module_that_has_more(tmp_path: Any) -> None:
    trained = Regressor(seed=3)
    trained.extra = nn.Linear(2, 2)  # a layer the class does not build: its keys are unexpected when loading
    trainer = train(tmp_path, trained)
    trainer.save_checkpoint(tmp_path / "wide.ckpt")
    with pytest.raises(Exception, match=r"unexpected keys \['extra.bias', 'extra.weight'\].*strict=False"):
        Regressor.load_from_checkpoint(tmp_path / "wide.ckpt")
    loaded = Regressor.load_from_checkpoint(tmp_path / "wide.ckpt", strict=False)
    assert not hasattr(loaded, "extra")
    assert_same_weights(loaded.net, trained.net)


def test_hparams_file_replaces_the_saved_hyperparameters(tmp_path: Any) -> None:
    """Lightning's hparams_file: the CSV logger's hparams.yaml, a .json or a key,value .csv builds the module;
    keyword overrides still win."""
    from stoker.loggers import CSVLogger

    trained = Regressor(lr=0.1, momentum=0.5, seed=3)
    train(tmp_path, trained)
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    logger = CSVLogger(tmp_path / "logs")
    logger.log_hyperparams({"lr": 0.25, "momentum": 0.5, "seed": 3})
    yaml_file = os.path.join(logger.log_dir, "hparams.yaml")
    loaded = Regressor.load_from_checkpoint(path, hparams_file=yaml_file)
    assert loaded.hparams.lr == 0.25 and loaded.hparams.seed == 3
    assert_same_weights(loaded, trained)
    (tmp_path / "h.csv").write_text("key,value\nlr,0.5\nmomentum,0.0\nseed,3\n")
    from_csv = Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "h.csv", momentum=0.9)
    assert (from_csv.hparams.lr, from_csv.hparams.momentum, from_csv.hparams.seed) == (0.5, 0.9, 3)
    (tmp_path / "h.json").write_text(json.dumps({"lr": 0.75, "momentum": 0.1, "seed": 3}))
    assert Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "h.json").hparams.lr == 0.75
    with pytest.raises(ValueError, match=r"expected a \.yaml, \.yml, \.json or \.csv file"):
        Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "h.txt")
    with pytest.raises(FileNotFoundError, match="no such file"):
        Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="holds a list, not a mapping"):
        Regressor.load_from_checkpoint(path, hparams_file=tmp_path / "list.yaml")


@pytest.mark.parametrize("map_location", [{"cpu": "cpu"}, lambda storage, location: storage])
def test_map_location_takes_torch_loads_dict_and_function_forms(tmp_path: Any, map_location: Any) -> None:
    trained = Regressor(seed=5)
    train(tmp_path, trained)
    loaded = Regressor.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"),
                                            map_location=map_location)
    assert loaded.net[0].weight.device.type == "cpu"
    assert_same_weights(loaded, trained)


class Regression(DataModule):
    def __init__(self, n: int = 16, batch_size: int = 4, note: str = "x") -> None:
        super().__init__()
        self.save_hyperparameters(ignore="note")
        self.epochs_seen = 0

    def train_dataloader(self) -> Any:
        return make_loader(make_regression_data(n=self.hparams.n), batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict:
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epochs_seen = int(state_dict["epochs_seen"])


def test_a_data_module_is_rebuilt_from_the_checkpoint_it_was_trained_with(tmp_path: Any) -> None:
    data = Regression(n=16, batch_size=4, note="not saved")
    data.epochs_seen = 3
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path, callbacks=[ModelCheckpoint(save_last=True)])
    trainer.fit(Regressor(), datamodule=data)
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    again = Regression.load_from_checkpoint(path)
    assert dict(again.hparams) == {"n": 16, "batch_size": 4} and again.epochs_seen == 3
    assert Regression.load_from_checkpoint(path, batch_size=8, map_location="cpu").hparams.batch_size == 8
    with pytest.raises(FileNotFoundError, match="not a Trainer checkpoint folder"):
        Regression.load_from_checkpoint(tmp_path)


def test_strict_loading_is_the_modules_choice_and_a_contradiction_is_an_error(tmp_path: Any) -> None:
    train(tmp_path, Regressor(seed=6))
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")

    class Wider(Regressor):  # one layer more than the checkpoint holds
        def __init__(self, partial: bool | None = None, **kw: Any) -> None:
            super().__init__(**kw)
            self.extra = nn.Linear(2, 2)
            if partial is not None:
                self.strict_loading = not partial

    with pytest.raises(Exception, match="missing keys"):
        Wider.load_from_checkpoint(path)  # strict by default
    loaded = Wider.load_from_checkpoint(path, partial=True)  # the module's choice: not strict
    assert not loaded.strict_loading
    assert Wider.load_from_checkpoint(path, strict=False).strict_loading  # strict=False for this call only
    with pytest.raises(ValueError, match=r"strict=True\) contradicts the module's strict_loading=False"):
        Wider.load_from_checkpoint(path, partial=True, strict=True)


def test_a_resumed_fit_follows_the_modules_strict_loading(tmp_path: Any) -> None:
    train(tmp_path, Regressor(seed=6))
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")

    class WithBuffer(Regressor):  # a buffer the checkpoint does not hold (no new parameter: same optimizer)
        def __init__(self, partial: bool) -> None:
            super().__init__(seed=6)
            self.register_buffer("extra", torch.ones(2))
            self.strict_loading = not partial

    def resume(module: Regressor) -> Trainer:
        trainer = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=False, default_root_dir=tmp_path / "again")
        trainer.fit(module, make_loader(make_regression_data(n=32)), ckpt_path=path)
        return trainer

    with pytest.raises(ValueError, match="extra"):
        resume(WithBuffer(partial=False))
    assert resume(WithBuffer(partial=True)).global_step == 8


def test_load_from_checkpoint_called_on_an_instance_is_an_error_not_a_silent_no_op(tmp_path: Any) -> None:
    """``module.load_from_checkpoint(path)`` returns a new object and leaves ``module`` as it was: a script that drops
    the result would go on with the old weights, so the call is a ``TypeError`` (Lightning's rule), for data modules
    too. Looking the attribute up stays possible."""
    trained = Regressor(seed=3)
    train(tmp_path, trained)
    path = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    module = Regressor()
    method = module.load_from_checkpoint
    with pytest.raises(TypeError, match=r"cannot be called on an instance.*Regressor\.load_from_checkpoint\(\.\.\.\)"):
        method(path)
    with pytest.raises(TypeError, match="cannot be called on an instance"):
        DataModule().load_from_checkpoint(path)
    assert_same_weights(Regressor.load_from_checkpoint(path), trained)
