"""Accumulation windows that run across loader ends: ``GradientAccumulationPlugin(sync_with_dataloader=False)``.

Five batches an epoch and windows of three: the second window takes two batches of epoch 0 and one of epoch 1.
A plain PyTorch loop that divides every loss by 3 and steps/clears every third micro-batch, whatever the epoch,
is the reference (fp32, bit for bit); a run saved and resumed inside such a window must end identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from stoker import Accelerator, DataLoaderConfiguration, set_seed
from stoker.utils import GradientAccumulationPlugin
from tests.helpers.models import clone_model, make_mlp, make_regression_data
from tests.helpers.weights import assert_same_weights, grads_of

STEPS, BATCH = 3, 2


def _across(num_steps: int = STEPS) -> Accelerator:
    plugin = GradientAccumulationPlugin(num_steps=num_steps, sync_with_dataloader=False)
    # Stateful loaders: save_state keeps the loader's position too (Accelerate's rule).
    return Accelerator(cpu=True, gradient_accumulation_plugin=plugin,
                       dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))


def _plain(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[bool]:
    """The reference loop: SGD with momentum and a LambdaLR stepped with it; returns which micro-batches stepped."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + s))
    stepped = []
    for i, (x, y) in enumerate(batches, start=1):
        (F.mse_loss(model(x), y) / STEPS).backward()
        stepped.append(i % STEPS == 0)
        if stepped[-1]:
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    return stepped


@pytest.mark.parametrize("epochs", [3, 2])  # 15 micro-batches: 5 whole windows; 10: 3 windows and one left open
def test_windows_span_epoch_ends_like_a_plain_loop(epochs: int) -> None:
    data = make_regression_data(n=10)
    loader = DataLoader(data, batch_size=BATCH)
    model = make_mlp(seed=4)
    reference = clone_model(model)
    expected = _plain(reference, [batch for _ in range(epochs) for batch in loader])
    accelerator = _across()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + s))
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    seen, ends = [], []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                opt.step()
                sched.step()
                opt.zero_grad()
            seen.append(accelerator.sync_gradients)
            ends.append(accelerator.gradient_state.end_of_dataloader)
    assert seen == expected  # the loader's end (every fifth batch) closes nothing
    assert ends == [i % 5 == 4 for i in range(5 * epochs)]
    assert accelerator.step == 5 * epochs // STEPS
    assert_same_weights(model, reference, f"{epochs} epochs")
    # An incomplete last window keeps its gradients, as the plain loop does (no zero_grad yet).
    assert_same_weights(grads_of(model), grads_of(reference), "the open window's gradients")
    assert (grads_of(model)[0] is None) == (epochs == 3)
    assert sched.get_last_lr() == [0.1 / (1 + 5 * epochs // STEPS)]


def test_one_window_spans_two_loaders() -> None:
    # Two loaders of two batches each per "step" (e.g. two datasets), windows of four: one update per pass.
    x, y = make_regression_data(n=8).tensors
    first = DataLoader(torch.utils.data.TensorDataset(x[:4], y[:4]), batch_size=BATCH)
    second = DataLoader(torch.utils.data.TensorDataset(x[4:], y[4:]), batch_size=BATCH)
    model = make_mlp(seed=5)
    reference = clone_model(model)
    batches = [b for _ in range(2) for b in [*first, *second]]
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for i, (xb, yb) in enumerate(batches, start=1):
        (F.mse_loss(reference(xb), yb) / 4).backward()
        if i % 4 == 0:
            opt.step()
            opt.zero_grad()
    accelerator = _across(num_steps=4)
    model, opt, first, second = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), first, second)
    seen = []
    for _ in range(2):
        for loader in (first, second):
            for xb, yb in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(F.mse_loss(model(xb), yb))
                    opt.step()
                    opt.zero_grad()
                seen.append(accelerator.sync_gradients)
    assert seen == [False, False, False, True] * 2
    assert_same_weights(model, reference, "two loaders per window")


def test_default_still_closes_the_window_at_the_loaders_end() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=STEPS))
    net = make_mlp(seed=6)
    model, opt, loader = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1),
                                             DataLoader(make_regression_data(n=10), batch_size=BATCH))
    seen = []
    for x, _ in loader:
        with accelerator.accumulate(model):
            seen.append(accelerator.sync_gradients)
    assert seen == [False, False, True, False, True]
    assert accelerator.sync_with_dataloader and accelerator.gradient_state.sync_with_dataloader


def test_the_setting_reaches_the_state_views_and_is_validated() -> None:
    accelerator = _across()
    assert accelerator.sync_with_dataloader is False
    assert accelerator.gradient_state.sync_with_dataloader is False
    assert accelerator.gradient_state.plugin_kwargs["sync_with_dataloader"] is False
    with pytest.raises(TypeError, match="sync_with_dataloader='no'"):
        GradientAccumulationPlugin(num_steps=2, sync_with_dataloader="no")


EPOCHS = 3


def _resumable_run(folder: Path, stop_after: int | None = None, resume: bool = False) -> torch.nn.Module:
    """Shuffled loader, dropout, AdamW + StepLR, windows of 3 over 5 batches an epoch; ``stop_after`` micro-batches:
    ``save_state`` there and return; ``resume``: ``load_state`` into fresh objects first."""
    set_seed(0)
    accelerator = _across()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    loader = DataLoader(make_regression_data(n=10), batch_size=BATCH, shuffle=True)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    if resume:
        accelerator.load_state(folder)
    done = 0
    while loader.epoch < EPOCHS:  # the loader knows its epoch: a resumed run continues where it stopped
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                opt.step()
                sched.step()
                opt.zero_grad()
            done += 1
            if done == stop_after:
                assert not accelerator.sync_gradients  # inside a window
                accelerator.save_state(folder)
                return model
    return model


# Windows are micro-batches 1-3, 4-6, 7-9, 10-12, 13-15; epochs end after 5, 10 and 15. Stopped after micro-batch 4
# (the window will span epoch 0's end), 5 (at that end), 10 (at epoch 1's end) or 11 (one batch into epoch 2).
@pytest.mark.parametrize("stop_after", [4, 5, 10, 11])
def test_save_inside_a_window_that_spans_a_loader_end_resumes_exactly(tmp_path: Path, stop_after: int) -> None:
    expected = _resumable_run(tmp_path)
    _resumable_run(tmp_path, stop_after=stop_after)
    resumed = _resumable_run(tmp_path, resume=True)
    assert_same_weights(resumed, expected, f"resumed after micro-batch {stop_after}")
    assert_same_weights(grads_of(resumed), grads_of(expected), "the open last window's gradients")


def test_the_core_accelerator_takes_the_setting_and_free_memory_keeps_it() -> None:
    from stoker.accelerator import Accelerator as CoreAccelerator

    accelerator = CoreAccelerator(cpu=True, gradient_accumulation_steps=2)
    accelerator.sync_with_dataloader = False
    accelerator.free_memory()
    net = make_mlp(seed=8)
    model, opt, loader = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1),
                                             DataLoader(make_regression_data(n=6), batch_size=BATCH))
    seen = []
    for _ in range(2):  # 3 batches an epoch, windows of 2: the second window spans the epoch's end
        for _batch in loader:
            with accelerator.accumulate(model):
                seen.append(accelerator.sync_gradients)
    assert seen == [False, True] * 3 and accelerator.sync_with_dataloader is False
