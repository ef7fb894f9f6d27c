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
            if accelerator.step == warmup_steps and not counter._patches and not counter.events:
                counter.__enter__()
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
    counter.__exit__(None, None, None)
    return counter, accelerator
