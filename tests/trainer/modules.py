"""TrainingModules and a raw PyTorch loop shared by the Trainer tests.

Everything is tiny and seeded locally (``tests.helpers.models``), so a Trainer run takes milliseconds on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from stoker import Callback, TrainingModule
from tests.helpers.models import make_mlp


class Regressor(TrainingModule):
    """An MLP with an MSE loss; the optimizer and scheduler are chosen by arguments."""

    def __init__(self, lr: float = 0.05, momentum: float = 0.9, scheduler: str | None = None,
                 interval: str = "step", frequency: int = 1, dropout: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = make_mlp(seed=seed)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.dropout(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test/loss", F.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        if self.hparams.scheduler is None:
            return opt
        sched = make_scheduler(opt, self.hparams.scheduler)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.hparams.interval,
                                                   "frequency": self.hparams.frequency, "monitor": "val/loss"}}


def make_scheduler(opt: torch.optim.Optimizer, kind: str) -> Any:
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    if kind == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.3 * s))
    if kind == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    raise ValueError(kind)


def raw_loop(model: nn.Module, batches: list, epochs: int, accumulate: int = 1, lr: float = 0.05,
             momentum: float = 0.9, clip: float | None = None, scheduler: str | None = None) -> nn.Module:
    """The canonical loop (nanoGPT's order): mean loss / window length, backward, clip, step, scheduler, zero."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    sched = make_scheduler(opt, scheduler) if scheduler else None
    for _ in range(epochs):
        for start in range(0, len(batches), accumulate):
            window = batches[start:start + accumulate]
            for x, y in window:
                loss = F.mse_loss(model(x), y)
                (loss / len(window) if len(window) > 1 else loss).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip)
            opt.step()
            if sched is not None:
                sched.step()
            opt.zero_grad(set_to_none=True)
    return model


class Recorder(Callback):
    """Records every hook call as ``name`` (callbacks) in one shared list."""

    def __init__(self, calls: list[str], tag: str = "cb") -> None:
        self.calls, self.tag = calls, tag

    @property
    def state_key(self) -> str:
        return f"Recorder[{self.tag}]"


def _recording(name: str):  # noqa: ANN202
    def hook(self: Recorder, trainer: Any, module: Any, *args: Any) -> None:
        self.calls.append(f"{self.tag}:{name}")
    hook.__name__ = name
    return hook


for _name in [n for n in dir(Callback) if n.startswith("on_") or n in ("setup", "teardown")]:
    setattr(Recorder, _name, _recording(_name))
