"""The Trainer moves the global RNG as a plain loop does (the prepared loaders' GlobalDraws): a model with dropout,
validated every epoch, trains to the same weights as the hand-written loop over several epochs; shuffled too with
``use_distributed_sampler=False`` (the user's RandomSampler kept, as in Lightning)."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Trainer, TrainingModule

X = torch.arange(64.0).reshape(16, 4) / 64
DATA = TensorDataset(X, X.sum(1, keepdim=True))


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))


def _plain(shuffle: bool, epochs: int) -> list[torch.Tensor]:
    net = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loader, val = DataLoader(DATA, batch_size=4, shuffle=shuffle), DataLoader(DATA, batch_size=8)
    for _ in range(epochs):
        net.train()
        for x, y in loader:
            F.mse_loss(net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        net.eval()
        with torch.no_grad():
            for x, _ in val:
                net(x)
    return [p.detach().clone() for p in net.parameters()]


class Module(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def training_step(self, batch, batch_idx):
        return F.mse_loss(self.net(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


@pytest.mark.parametrize("shuffle, use_distributed_sampler", [(False, True), (True, False)])
def test_trainer_with_dropout_matches_the_plain_loop_over_epochs(tmp_path, shuffle, use_distributed_sampler):
    expected = _plain(shuffle, epochs=3)
    module = Module()
    Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path,
            use_distributed_sampler=use_distributed_sampler).fit(
        module, DataLoader(DATA, batch_size=4, shuffle=shuffle), DataLoader(DATA, batch_size=8))
    for a, b in zip(module.net.parameters(), expected):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0)
