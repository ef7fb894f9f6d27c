"""Trainer vs a raw PyTorch loop: identical weights (fp32), loss normalisation, and mixed precision on CPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from stoker import Callback, Trainer, TrainingModule
from tests.helpers.models import Regressor, batches, clone_model, make_loader, make_regression_data, raw_loop
from tests.helpers.trainers import quiet_trainer as bare
from tests.helpers.weights import params_of


@pytest.mark.parametrize("accumulate, clip, scheduler", [(1, None, None), (2, 0.5, "step"), (3, 1.0, "lambda")])
def test_fp32_parity_with_raw_loop_is_exact(accumulate: int, clip: float | None, scheduler: str | None) -> None:
    data = make_regression_data(n=40)  # 5 batches of 8: windows of 2 end with a partial window of 1
    module = Regressor(scheduler=scheduler, interval="step")
    reference = raw_loop(clone_model(module.net), batches(data, 8), epochs=3, accumulate=accumulate, clip=clip,
                         scheduler=scheduler)
    trainer = bare(max_epochs=3, accumulate=accumulate, clip_grad_norm=clip)
    trainer.fit(module, make_loader(data, batch_size=8))
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    windows = -(-5 // accumulate)
    assert trainer.global_step == 3 * windows
    assert trainer.current_epoch == 3
    if scheduler:  # stepped once per optimizer step, not per batch
        assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 3 * windows


def test_accumulated_micro_batches_equal_one_big_batch() -> None:
    data = make_regression_data(n=32)
    big, small = Regressor(momentum=0.0), Regressor(momentum=0.0)
    bare(max_steps=2).fit(big, make_loader(data, batch_size=16))
    bare(max_steps=2, accumulate=4).fit(small, make_loader(data, batch_size=4))
    for a, b in zip(params_of(big), params_of(small)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


class Ragged(Dataset):
    """Sequences of different lengths: a token-level loss summed per batch."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.items = [torch.randn(n, 8, generator=g) for n in (3, 9, 1, 6, 2, 7)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.items[i]


class TokenModel(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        tokens = batch[0] if isinstance(batch, list) else batch
        per_token = self(tokens).pow(2).sum(-1)
        return {"loss": per_token.sum(), "num_items": per_token.numel()}


def test_num_items_gives_the_exact_per_token_mean_over_a_window_of_ragged_batches() -> None:
    data = Ragged()
    module = TokenModel(momentum=0.0)
    reference = clone_model(module.net)
    loader = DataLoader(data, batch_size=None)  # one ragged sequence per micro-batch
    bare(max_steps=1, accumulate=6).fit(module, loader)
    # One big batch: every token of the window, mean over all 28 tokens.
    everything = torch.cat(data.items)
    loss = reference(everything).pow(2).sum(-1).mean()
    loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.05 * p.grad
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class Classifier(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.net(x)  # a submodule, not self(): the Trainer's autocast must still apply
        self.dtypes.add(out.dtype)
        loss = F.mse_loss(out.float(), y)
        self.log("loss", loss, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class EpochLosses(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        self.losses.append(float(trainer.callback_metrics["loss_epoch"]))


@pytest.mark.parametrize("precision, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_mixed_precision_trains_on_cpu(precision: str, dtype: torch.dtype) -> None:
    module = Classifier()
    module.dtypes = set()
    losses = EpochLosses()
    trainer = bare(max_epochs=6, accumulate=2, precision=precision, callbacks=[losses])
    trainer.fit(module, make_loader(make_regression_data(n=64), batch_size=8))
    assert module.dtypes == {dtype}
    # fp16 may skip a step or two while its loss scale settles (those are not counted); bf16 never skips.
    assert trainer.global_step == 6 * 4 if precision == "bf16" else 6 * 4 - 3 <= trainer.global_step <= 6 * 4
    assert losses.losses[-1] < 0.5 * losses.losses[0], losses.losses


class Overflowing(Regressor):
    """The first micro-batch's loss is finite but overflows once scaled: fp16's scaler must skip that step.

    (A loss that is itself inf is a non-finite loss: the Trainer raises on it by default, see test_bad_input.py.)
    """

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * 1e36 if self.trainer.current_epoch == 0 and batch_idx == 0 else loss


def test_fp16_skipped_steps_neither_count_nor_step_the_scheduler() -> None:
    module = Overflowing(scheduler="lambda", interval="step")
    trainer = bare(max_epochs=2, precision="fp16")
    before = params_of(module)
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8))
    assert trainer.global_step == 2 * 4 - 1
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == trainer.global_step
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, params_of(module)))
