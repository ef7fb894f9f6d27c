"""Training loops whose host-device syncs the sync-count tests measure (shared by in-process and 2-process tests).

``accelerator_loop`` is the seed tutorial's loop shape (``examples/accelerator_loop.py``): accumulate, backward,
clip on sync steps, optimizer step, scheduler step, zero_grad, the loss summed on the device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, set_seed
from tests.helpers.sync_counter import SyncCounter


def accelerator_loop(precision: str, warmup_steps: int = 2, counted_steps: int = 6, accumulate: int = 2,
                     **counter_kwargs: Any) -> tuple[SyncCounter, Accelerator]:
    """Runs the tutorial loop; counts syncs from optimizer step ``warmup_steps`` for ``counted_steps`` steps.

    The loader holds several epochs' worth of windows, so epoch boundaries fall inside the counted span.
    """
    set_seed(0)
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=accumulate)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 8, generator=g), torch.randn(40, 1, generator=g)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)  # 10 batches: 5 windows per epoch
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = SyncCounter(**counter_kwargs)
    total = torch.zeros((), device=accelerator.device)
    end = warmup_steps + counted_steps
    while accelerator.step < end:
        for inputs, targets in loader:
            if accelerator.step == warmup_steps and not counter.active and not counter.events:
                counter.start()
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(inputs), targets)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            total += loss.detach()
            if accelerator.step >= end:
                break
    counter.stop()
    return counter, accelerator


def trainer_fit(precision: str = "fp32", *, log_every_step: bool = True, progress_bar: bool = True,
                logger: Any = "csv", root: str = ".", warmup_steps: int = 2, counted_steps: int = 6,
                accumulate: int = 2, **counter_kwargs: Any) -> tuple[SyncCounter, Any]:
    """``Trainer.fit`` of a small regression module; counts syncs over ``counted_steps`` optimizer steps.

    Counting starts at the first batch of optimizer step ``warmup_steps`` and ends after the batch that completes
    step ``warmup_steps + counted_steps`` (a callback switches the counter), so set-up and teardown are outside.
    ``log_every_step`` makes ``training_step`` call ``self.log(..., prog_bar=True)`` with a tensor every step;
    ``log_every_n_steps`` is 50, beyond the counted span, so the loggers are not due inside it. The bar redraws on
    a time interval (each redraw reads its values, which the issue allows); it is given an hour here so that a
    slow machine does not redraw inside the span. The data gives 10 optimizer steps per epoch and process in 2
    processes (20 in one), so the span holds no epoch end.
    """
    from stoker import Callback, ProgressBar, Trainer, TrainingModule

    counter = SyncCounter(**counter_kwargs)
    end = warmup_steps + counted_steps

    class Module(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            if log_every_step:
                self.log("train/loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class Switch(Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == warmup_steps and not counter.active and not counter.events:
                counter.start()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step >= end:
                counter.stop()

    set_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(160, 8, generator=g), torch.randn(160, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    callbacks: list[Any] = [Switch()]
    if progress_bar:
        callbacks.append(ProgressBar(refresh_rate=3600, line_interval=3600))
    trainer = Trainer(max_steps=end + 1, accumulate=accumulate, precision=precision, logger=logger,
                      enable_progress_bar=progress_bar, enable_checkpointing=False, default_root_dir=root,
                      accelerator="cpu", callbacks=callbacks, log_every_n_steps=50)
    try:
        trainer.fit(Module(), loader)
    finally:
        counter.stop()
    return counter, trainer
