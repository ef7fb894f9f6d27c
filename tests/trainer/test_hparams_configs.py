"""Hyperparameters that come in config objects (an OmegaConf ``DictConfig`` from Hydra, its ``ListConfig``s, other
mappings): kept whole in ``hparams``, in checkpoints, in exported weights and in ``hparams.yaml``, and rebuilt as
the same kind by ``load_from_checkpoint``."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn

from stoker import Trainer, TrainingModule
from stoker.callbacks import ModelCheckpoint
from stoker.callbacks.hparams_file import plain_form, write_hparams
from tests.helpers.models import make_loader, make_regression_data


class FromConfig(TrainingModule):
    """The Hydra pattern: one config argument, its nested values read as attributes."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.save_hyperparameters(cfg)
        self.net = nn.Sequential(nn.Linear(8, cfg.model.width), nn.ReLU(), nn.Linear(cfg.model.width, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.optim.lr)


def config() -> DictConfig:
    return OmegaConf.create({"model": {"width": 6, "blocks": [2, {"kind": "res"}]},
                             "optim": {"lr": 0.05}, "tag": "w${model.width}"})


def fit(tmp_path: Any, module: TrainingModule, **checkpoint: Any) -> Trainer:
    trainer = Trainer(max_epochs=1, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path, callbacks=[ModelCheckpoint(save_last=True, **checkpoint)])
    trainer.fit(module, make_loader(make_regression_data(n=32)))
    return trainer


def test_a_dictconfig_given_whole_is_the_hparams() -> None:
    cfg = config()
    module = FromConfig(cfg)
    assert module.hparams is cfg and module.hparams.model.blocks[1].kind == "res"
    assert module.hparams_initial == {"model": cfg.model, "optim": cfg.optim, "tag": "w6"}


def test_load_from_checkpoint_rebuilds_the_dictconfig_with_its_nested_values(tmp_path: Any) -> None:
    trained = FromConfig(config())
    fit(tmp_path, trained)
    loaded = FromConfig.load_from_checkpoint(os.path.join(tmp_path, "stoker_logs", "version_0", "checkpoints",
                                                          "last.ckpt"))
    assert isinstance(loaded.hparams, DictConfig)
    assert loaded.hparams.model.width == 6 and loaded.hparams.model.blocks[1].kind == "res"
    assert loaded.hparams.optim.lr == 0.05 and loaded.hparams.tag == "w6"  # interpolations saved resolved
    for ours, theirs in zip(loaded.state_dict().values(), trained.state_dict().values()):
        assert torch.equal(ours, theirs)


def test_exported_weights_rebuild_the_dictconfig(tmp_path: Any) -> None:
    fit(tmp_path, FromConfig(config()), export_weights=True)
    folder = os.path.join(tmp_path, "stoker_logs", "version_0", "checkpoints", "weights", "last.ckpt")
    loaded = FromConfig.load_from_checkpoint(folder)
    assert isinstance(loaded.hparams, DictConfig) and loaded.hparams.model.blocks[1].kind == "res"


class Plain(TrainingModule):
    def __init__(self, widths: Any, options: Any, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_config_values_among_plain_arguments_are_stored_as_data(tmp_path: Any) -> None:
    # A ListConfig and a DictConfig among other arguments are data: kept as a list and a dict, not as their repr (a
    # value kept as its repr is left out when loading, and load_from_checkpoint then asks for it again).
    module = Plain(ListConfig([4, 5]), OmegaConf.create({"depth": 2}))
    trainer = fit(tmp_path, module)
    loaded = Plain.load_from_checkpoint(trainer.checkpoint_callback.last_model_path)
    assert loaded.hparams.widths == [4, 5] and loaded.hparams.options == {"depth": 2}
    with open(os.path.join(trainer.log_dir, "hparams.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert "widths:\n- 4\n- 5\n" in text and "options:\n  depth: 2\n" in text


def test_plain_form_is_the_one_rule_for_checkpoints_and_json() -> None:
    tensor = torch.ones(2)
    assert plain_form({"t": tensor}, for_json=False) == ({"t": tensor}, True)
    assert plain_form({"t": tensor}, for_json=True) == ({"t": repr(tensor)}, False)
    assert plain_form({1: "a"}, for_json=False) == ({"1": "a"}, True)  # checkpoints write keys as text
    assert plain_form({1: "a"}, for_json=True) == ({"1": "a"}, False)
    assert plain_form((1, ListConfig([2])), for_json=True) == ([1, [2]], True)
    assert plain_form(object, for_json=False) == (repr(object), False)


def test_a_dictconfig_with_an_ignored_key_is_copied_into_plain_hparams() -> None:
    class Ignoring(TrainingModule):
        def __init__(self, cfg: Any) -> None:
            super().__init__()
            self.save_hyperparameters(cfg, ignore="optim")

    module = Ignoring(config())
    assert not isinstance(module.hparams, DictConfig) and set(module.hparams) == {"model", "tag"}


def test_loading_a_dictconfig_checkpoint_without_omegaconf_says_what_to_install(tmp_path: Any,
                                                                                monkeypatch: Any) -> None:
    fit(tmp_path, FromConfig(config()))
    monkeypatch.setitem(sys.modules, "omegaconf", None)  # as if it were not installed
    with pytest.raises(ModuleNotFoundError, match="install omegaconf"):
        FromConfig.load_from_checkpoint(os.path.join(tmp_path, "stoker_logs", "version_0", "checkpoints",
                                                     "last.ckpt"))


def test_a_checkpoint_cannot_name_code_to_run_when_loading(tmp_path: Any) -> None:
    # LightningCLI's modules record "_instantiator"; any other builder named there is refused, not imported
    trainer = fit(tmp_path, Plain([4, 5], {"depth": 2}))
    folder = trainer.checkpoint_callback.last_model_path
    module = Plain([4, 5], {"depth": 2})
    module.hparams["_instantiator"] = "os.system"
    write_hparams(module, folder)  # an hparams.json beside the weights, edited
    with pytest.raises(ValueError, match=r"name the instantiator 'os.system'; the only one a checkpoint may name"):
        Plain.load_from_checkpoint(os.path.join(folder, "model.safetensors"))
