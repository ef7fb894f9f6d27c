"""Tiny models and generated data shared by the test suite.

Everything here is deterministic (seeded locally, never through the global RNG) and small enough that a test
runs in milliseconds on a CPU. Other test folders import these helpers: keep the names and defaults stable.

``Regressor`` is the suite's one TrainingModule for regression (the Trainer, callback and logger tests, and plain
Accelerator loops, which use it as an ``nn.Module``); ``raw_loop`` trains it by hand in the canonical order for the
parity tests. Weight snapshots and comparisons live in ``tests.helpers.weights``, hook recorders in
``tests.helpers.hooks``.

Example:
    >>> model = make_mlp(seed=0)
    >>> loader = make_loader(make_regression_data(n=32), batch_size=8)
    >>> module = Regressor(lr=0.1, scheduler="step")  # SGD with momentum 0.9, StepLR every 2 steps
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

from stoker import TrainingModule

IN_FEATURES = 8
OUT_FEATURES = 2


def make_mlp(in_features: int = IN_FEATURES, hidden: int = 16, out_features: int = OUT_FEATURES,
             seed: int = 0, batch_norm: bool = False) -> nn.Sequential:
    """A two-layer MLP whose initial weights depend only on ``seed`` (the global RNG is left untouched).

    ``batch_norm=True`` puts a ``BatchNorm1d`` after the first layer; it draws no random numbers, so both linear
    layers get the same initial weights as without it.
    """
    # fork_rng: building a model must not shift the random stream of the test that builds it.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        norm = [nn.BatchNorm1d(hidden)] if batch_norm else []
        return nn.Sequential(nn.Linear(in_features, hidden), *norm, nn.Tanh(), nn.Linear(hidden, out_features))


def make_scheduler(opt: torch.optim.Optimizer, kind: str) -> Any:
    """The learning-rate schedulers the tests name: ``step`` (halves every 2 steps), ``lambda`` (1 / (1 + 0.3 s)),
    ``plateau`` (halves when ``val/loss`` stalls) and ``epoch`` (a tenth every step of its interval)."""
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    if kind == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.3 * s))
    if kind == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    if kind == "epoch":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    raise ValueError(f"make_scheduler(kind={kind!r}): expected 'step', 'lambda', 'plateau' or 'epoch'.")


class Regressor(TrainingModule):
    """``make_mlp`` with an MSE loss and SGD; logs ``train/loss`` every step, ``val/loss`` and ``test/loss``.

    Args:
        lr, momentum: SGD's (momentum 0.0 is plain SGD, as the hand-written recipes of the callback tests use).
        scheduler: None, or a ``make_scheduler`` kind. ``epoch`` is returned in the tuple form
            ``(optimizer, scheduler)`` (stepped per epoch); the others in the dict form with ``interval``,
            ``frequency`` and ``monitor="val/loss"``.
        dropout: on the input (no Dropout layer at 0.0).
        seed: of the MLP's initial weights. ``batch_norm``: a BatchNorm after the first layer.
        val_scores: if given, ``val/score`` is logged at each validation's end: the entry numbered by the
            trainer's epoch, so a test scripts what ModelCheckpoint / EarlyStopping see (a resumed run follows it).
        groups: two parameter groups (the second layer at a tenth of ``lr``).
        prog_bar: whether ``train/loss`` and ``val/loss`` go to the progress bar as well.

    The steps call the module (``self(x)``), so what the Accelerator puts around ``forward`` (``bf16-true``'s
    input cast) applies. ``validations`` counts validation runs.

    Example:
        >>> Regressor(momentum=0.0, prog_bar=True, val_scores=[0.5, 0.25])
    """

    def __init__(self, lr: float = 0.05, momentum: float = 0.9, scheduler: str | None = None,
                 interval: str = "step", frequency: int = 1, dropout: float = 0.0, seed: int = 0,
                 batch_norm: bool = False, val_scores: list[float] | None = None, groups: bool = False,
                 prog_bar: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = make_mlp(seed=seed, batch_norm=batch_norm)
        self.dropout = nn.Dropout(dropout) if dropout else None  # no layer at 0.0: the summary shows `net` alone
        self.val_scores = list(val_scores) if val_scores is not None else None
        self.validations = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x if self.dropout is None else self.dropout(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train/loss", loss, prog_bar=self.hparams.prog_bar)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.mse_loss(self(x), y), prog_bar=self.hparams.prog_bar)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test/loss", F.mse_loss(self(x), y))

    def on_validation_epoch_end(self) -> None:
        if self.val_scores is not None:
            self.log("val/score", self.val_scores[self.trainer.current_epoch])
        self.validations += 1

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        if hp.groups:
            params: Any = [{"params": self.net[0].parameters()},
                           {"params": self.net[-1].parameters(), "lr": hp.lr / 10}]
        else:
            params = self.parameters()
        opt = torch.optim.SGD(params, lr=hp.lr, momentum=hp.momentum)
        if hp.scheduler is None:
            return opt
        sched = make_scheduler(opt, hp.scheduler)
        if hp.scheduler == "epoch":
            return opt, sched
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": hp.interval,
                                                   "frequency": hp.frequency, "monitor": "val/loss"}}


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


def lbfgs_loop(model: nn.Module, batches: list, epochs: int, lr: float = 0.5, max_iter: int = 4) -> int:
    """A plain closure loop with ``torch.optim.LBFGS``; returns how many times the closure ran."""
    optimizer = torch.optim.LBFGS(model.parameters(), lr=lr, max_iter=max_iter)
    evaluations = 0
    for _ in range(epochs):
        for x, y in batches:
            def closure() -> torch.Tensor:
                nonlocal evaluations
                evaluations += 1
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss
            optimizer.step(closure)
    return evaluations


def clone_model(model: nn.Module) -> nn.Module:
    """An independent copy with identical weights (for a raw loop to run beside the Accelerator)."""
    return copy.deepcopy(model)


def make_regression_data(n: int = 64, in_features: int = IN_FEATURES, out_features: int = OUT_FEATURES,
                         seed: int = 0) -> TensorDataset:
    """``n`` pairs ``(x, y)`` with ``y`` a fixed linear function of ``x`` plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=g)
    w = torch.randn(in_features, out_features, generator=g)
    y = x @ w + 0.1 * torch.randn(n, out_features, generator=g)
    return TensorDataset(x, y)


def make_loader(dataset: Dataset, batch_size: int = 8, shuffle: bool = False) -> DataLoader:
    """A plain ``DataLoader`` (no workers, so tests stay fast and deterministic)."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


def batches(dataset: TensorDataset, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The dataset cut in order into batches (the last may be short), without a DataLoader."""
    x, y = dataset.tensors
    return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
