"""stoker.read_checkpoint: a checkpoint folder as the dict a Lightning script gets from torch.load(path)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import stoker
from stoker import Accelerator, ModelCheckpoint, Trainer, TrainingModule
from stoker.accelerator import CheckpointError


class Net(TrainingModule):
    def __init__(self, width: int = 3, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    def on_save_checkpoint(self, checkpoint):
        checkpoint["note"] = "added by a hook"


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g)), batch_size=4)


def _fit(tmp_path, **kw):
    net = Net()
    trainer = Trainer(default_root_dir=str(tmp_path), max_epochs=2, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, seed=0, **kw)
    trainer.fit(net, _loader())
    return trainer, net


def test_a_trainer_checkpoint_reads_as_lightnings_dict(tmp_path) -> None:
    trainer, net = _fit(tmp_path, callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ck"), save_last=True)])
    ckpt = stoker.read_checkpoint(tmp_path / "ck" / "last.ckpt")
    assert ckpt["epoch"] == 1 and ckpt["global_step"] == trainer.global_step == 6  # saved at the end of epoch 1
    assert set(ckpt["state_dict"]) == set(net.state_dict())
    for name, value in net.state_dict().items():
        assert torch.equal(ckpt["state_dict"][name], value)
    assert ckpt["hyper_parameters"] == {"width": 3, "lr": 0.1}
    assert ckpt["note"] == "added by a hook"
    assert any(key.startswith("ModelCheckpoint") for key in ckpt["callbacks"])
    assert ckpt["pytorch-lightning_version"] == stoker.__version__
    [opt_state] = ckpt["optimizer_states"]
    assert set(opt_state) == {"state", "param_groups"}
    momentum = trainer.optimizers[0].state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(opt_state["state"][0]["momentum_buffer"], momentum)
    [sched_state] = ckpt["lr_schedulers"]
    assert sched_state["last_epoch"] == trainer.lr_scheduler_configs[0].scheduler.last_epoch
    # The dict is the folder's content: the weights load back into a fresh module as with a Lightning .ckpt.
    fresh = Net()
    fresh.load_state_dict(ckpt["state_dict"])
    assert torch.equal(fresh.layer.weight, net.layer.weight)


def test_an_accelerator_folder_reads_without_trainer_keys(tmp_path) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    model, opt, sched = accelerator.prepare(model, opt, sched)
    accelerator.save_state(str(tmp_path / "state"))
    ckpt = stoker.read_checkpoint(str(tmp_path / "state"), map_location="cpu")
    assert "epoch" not in ckpt and len(ckpt["optimizer_states"]) == 1 and len(ckpt["lr_schedulers"]) == 1
    assert torch.equal(ckpt["state_dict"]["weight"], accelerator.unwrap_model(model).weight.detach())


def test_bad_paths_say_what_they_are(tmp_path) -> None:
    with pytest.raises(TypeError, match="str or os.PathLike"):
        stoker.read_checkpoint(3)
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        stoker.read_checkpoint(tmp_path / "missing")
    (tmp_path / "weights.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match="is a file; a stoker checkpoint is a folder"):
        stoker.read_checkpoint(tmp_path / "weights.safetensors")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        stoker.read_checkpoint(tmp_path / "plain")
    with pytest.raises(TypeError, match="map_location"):
        stoker.read_checkpoint(tmp_path / "plain", map_location={"cpu": "cpu"})


def test_a_changed_file_is_refused_and_nothing_is_written(tmp_path) -> None:
    _fit(tmp_path, callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ck"), save_last=True)])
    folder = tmp_path / "ck" / "last.ckpt"
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the manifest's checksum can tell
    weights.write_bytes(bytes(data))
    before = {name: os.path.getmtime(folder / name) for name in os.listdir(folder)}
    with pytest.raises(CheckpointError):
        stoker.read_checkpoint(folder)
    assert {name: os.path.getmtime(folder / name) for name in os.listdir(folder)} == before
