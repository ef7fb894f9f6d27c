"""A checkpoint written by Lightning (one ``.ckpt`` file, ``torch.save`` of a dict) loads into stoker: a user who
moves over keeps the models trained before. The file here is written by pytorch_lightning itself; stoker reads it
with ``torch.load(weights_only=True)`` unless ``load_from_checkpoint(weights_only=False)`` says the file is trusted."""

from __future__ import annotations

import os
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import stoker
from stoker import Trainer, TrainingModule
from stoker.accelerator import MismatchedKeysError


def _data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def _layers(hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))


class Net:
    """The module's code, as a Lightning user wrote it; below, on Lightning's base class and on stoker's (the
    renamed import)."""

    def __init__(self, hidden: int = 3, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = _layers(hidden)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class LightningNet(Net, pl.LightningModule):
    pass


class StokerNet(Net, TrainingModule):
    pass


@pytest.fixture(scope="module")
def lightning_ckpt(tmp_path_factory: Any) -> tuple[str, LightningNet]:
    """A checkpoint pytorch_lightning wrote after two epochs, and the module it came from."""
    folder = tmp_path_factory.mktemp("lightning")
    model = LightningNet(hidden=5, lr=0.05)
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=folder, accelerator="cpu", devices=1)
    trainer.fit(model, _data())
    path = str(folder / "epoch=1-step=8.ckpt")
    trainer.save_checkpoint(path)
    return path, model


def _trainer(tmp_path: Any) -> Trainer:
    return Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=0)


def test_load_from_checkpoint_rebuilds_a_lightning_module_with_its_hyperparameters_and_weights(lightning_ckpt) -> None:
    path, trained = lightning_ckpt
    module = StokerNet.load_from_checkpoint(path)
    assert module.hparams.hidden == 5 and module.hparams.lr == 0.05  # built from the file's hyper_parameters
    for (name, mine), (_, theirs) in zip(module.state_dict().items(), trained.state_dict().items(), strict=True):
        assert torch.equal(mine, theirs), name
    assert StokerNet.load_from_checkpoint(path, lr=0.5).hparams.lr == 0.5  # overrides win, as in Lightning


def test_the_hooks_see_lightnings_dict_and_read_checkpoint_returns_it(lightning_ckpt) -> None:
    path, _ = lightning_ckpt
    seen: dict[str, Any] = {}

    class Hooked(StokerNet):
        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            seen.update(checkpoint)

    Hooked.load_from_checkpoint(path)
    assert seen["epoch"] == 2 and seen["global_step"] == 8  # saved after the fit: current_epoch is 2
    read = stoker.read_checkpoint(path)
    assert read["global_step"] == 8 and sorted(read["state_dict"]) == sorted(seen["state_dict"])
    assert read["hyper_parameters"] == {"hidden": 5, "lr": 0.05}


def test_validate_test_and_predict_take_the_file_as_ckpt_path(lightning_ckpt, tmp_path) -> None:
    path, trained = lightning_ckpt
    expected = float(F.mse_loss(trained.net(_data().dataset.tensors[0]), _data().dataset.tensors[1]))
    result = _trainer(tmp_path).validate(StokerNet(hidden=5), _data(), ckpt_path=path)
    assert result[0]["val_loss"] == pytest.approx(expected, rel=1e-6)
    holder = StokerNet(hidden=5)
    stoker.load_checkpoint_in_model(holder, path, strict=True)  # the engine's loader reads its state_dict too
    assert torch.equal(holder.net[2].weight, trained.net[2].weight)
    # The keys carry the module's attribute name ("net."), so only a model with that attribute matches strictly.
    with pytest.raises(MismatchedKeysError):
        stoker.load_checkpoint_in_model(_layers(5), path, strict=True)


def test_fit_does_not_resume_from_a_single_file_and_says_what_to_do(lightning_ckpt, tmp_path) -> None:
    path, _ = lightning_ckpt
    with pytest.raises(ValueError, match=r"single-file PyTorch checkpoint.*load_from_checkpoint\(path\)"):
        _trainer(tmp_path).fit(StokerNet(hidden=5), _data(), ckpt_path=path)


class LightningConfigured(pl.LightningModule):
    """A Lightning module given its settings in one argument (Lightning records its name in the checkpoint)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.save_hyperparameters(config)
        self.net = _layers(config["hidden"])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class StokerConfigured(TrainingModule):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.net = _layers(config["hidden"])


@pytest.mark.parametrize("container", ["dict", "omegaconf"])
def test_settings_saved_from_one_argument_come_back_in_it(tmp_path, container: str) -> None:
    from omegaconf import DictConfig, OmegaConf

    config = {"hidden": 6, "lr": 0.01}
    module = LightningConfigured(OmegaConf.create(config) if container == "omegaconf" else config)
    path = os.path.join(tmp_path, "configured.ckpt")
    pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
               max_steps=1, accelerator="cpu", devices=1).fit(module, _data())
    module.trainer.save_checkpoint(path)
    # Lightning stores an OmegaConf container's class, which only a full unpickle rebuilds
    trusted = {"weights_only": False} if container == "omegaconf" else {}
    loaded = StokerConfigured.load_from_checkpoint(path, **trusted)
    assert loaded.config["hidden"] == 6 and loaded.config["lr"] == 0.01
    assert isinstance(loaded.config, DictConfig) == (container == "omegaconf")
    assert torch.equal(loaded.net[0].weight, module.net[0].weight)


class Opaque:
    """An object only a full unpickle rebuilds."""


def test_a_file_holding_objects_needs_weights_only_false(tmp_path) -> None:
    path = os.path.join(tmp_path, "opaque.ckpt")
    torch.save({"state_dict": StokerNet(hidden=2).state_dict(), "hyper_parameters": {"hidden": 2},
                "extra": Opaque()}, path)
    with pytest.raises(ValueError, match="weights_only=False"):
        StokerNet.load_from_checkpoint(path)
    with pytest.raises(ValueError, match="does not rebuild"):
        stoker.read_checkpoint(path)
    assert StokerNet.load_from_checkpoint(path, weights_only=False).hparams.hidden == 2  # trusted: unpickled


def test_a_file_of_weights_alone_loads_and_other_files_are_refused(tmp_path) -> None:
    source = StokerNet(hidden=4)
    weights = os.path.join(tmp_path, "weights.pt")
    torch.save(source.state_dict(), weights)
    loaded = StokerNet.load_from_checkpoint(weights, hidden=4)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), source.state_dict().values()))
    torch.save([1, 2], os.path.join(tmp_path, "list.pt"))
    with pytest.raises(ValueError, match="not a training checkpoint"):
        StokerNet.load_from_checkpoint(os.path.join(tmp_path, "list.pt"))
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="neither a .safetensors file nor a torch.save file"):
        StokerNet.load_from_checkpoint(tmp_path / "notes.txt")
    with pytest.raises(FileNotFoundError, match="not a checkpoint folder"):
        _trainer(tmp_path).validate(StokerNet(), _data(), ckpt_path=tmp_path / "notes.txt")
