"""Parity: the Accelerator against a raw PyTorch loop, and the accumulation window.

The raw loop is written in the canonical order (DESIGN.md "The step"): loss divided by the window's true length →
backward → on the window's last micro-batch: optimizer step → scheduler step → ``zero_grad(set_to_none=True)``.
In fp32 the arithmetic is the same, so the weights must be bit-identical.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Accelerator
from tests.helpers.models import batches, clone_model, make_loader, make_mlp, make_regression_data
from tests.helpers.weights import grads_of, params_of

OptimizerFactory = Callable[[torch.nn.Module], torch.optim.Optimizer]
OPTIMIZERS: dict[str, OptimizerFactory] = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.1),
}


def _lambda_lr(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + 0.5 * s))


def _raw_loop(model: torch.nn.Module, make_opt: OptimizerFactory, data: list, gas: int, epochs: int) -> list[float]:
    """The reference: plain PyTorch with accumulation, the last short window divided by its true length."""
    opt = make_opt(model)
    sched = _lambda_lr(opt)
    n = len(data)
    lrs = []
    for _ in range(epochs):
        for i, (x, y) in enumerate(data):
            window = min(gas, n - (i // gas) * gas)
            loss = F.mse_loss(model(x), y)
            (loss / window).backward()
            if (i + 1) % gas == 0 or i == n - 1:
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                lrs.append(opt.param_groups[0]["lr"])
    return lrs


def _accelerator_loop(model: torch.nn.Module, make_opt: OptimizerFactory, dataset: TensorDataset, batch_size: int,
                      gas: int, epochs: int) -> tuple[Accelerator, list[float]]:
    """The seed tutorial's loop with ``accumulate``: step, scheduler and zero_grad called on every micro-batch."""
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=gas)
    opt = make_opt(model)
    model, opt, loader, sched = accelerator.prepare(model, opt, make_loader(dataset, batch_size), _lambda_lr(opt))
    lrs = []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                opt.step()
                sched.step()
                opt.zero_grad()
            if accelerator.sync_gradients:
                lrs.append(opt.param_groups[0]["lr"])
    return accelerator, lrs


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("gas", [1, 3])
def test_fp32_parity_with_raw_loop_is_exact(opt_name: str, gas: int) -> None:
    # 40 samples in batches of 8: 5 micro-batches, so gas=3 ends each epoch with a partial window of 2.
    dataset = make_regression_data(n=40)
    model = make_mlp(seed=1)
    raw_model = clone_model(model)
    raw_lrs = _raw_loop(raw_model, OPTIMIZERS[opt_name], batches(dataset, 8), gas, epochs=2)
    accelerator, lrs = _accelerator_loop(model, OPTIMIZERS[opt_name], dataset, 8, gas, epochs=2)

    assert lrs == raw_lrs
    expected_steps = 2 * (5 if gas == 1 else 2)
    assert accelerator.step == expected_steps == len(raw_lrs)
    for p, q in zip(model.parameters(), raw_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_k_micro_batches_equal_one_batch_of_k_times_b() -> None:
    dataset = make_regression_data(n=48)
    k, b = 3, 4
    small = make_mlp(seed=2)
    big = clone_model(small)
    make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.05)  # noqa: E731
    _accelerator_loop(small, make_opt, dataset, b, gas=k, epochs=1)
    _accelerator_loop(big, make_opt, dataset, k * b, gas=1, epochs=1)
    moved = sum((p - q).abs().sum() for p, q in zip(small.parameters(), make_mlp(seed=2).parameters()))
    assert moved > 1e-3  # the comparison below means something only if training moved the weights
    for p, q in zip(small.parameters(), big.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


class _Stream(IterableDataset):
    """A dataset of unknown length: the Accelerator only learns the window ended when the stream does."""

    def __init__(self, dataset: TensorDataset) -> None:
        self.dataset = dataset

    def __iter__(self):  # noqa: ANN204
        yield from self.dataset


@pytest.mark.parametrize("kind", ["map-style", "iterable"])
def test_partial_last_window_is_divided_by_its_true_length(kind: str) -> None:
    # 5 micro-batches, gradient_accumulation_steps=2: windows (1,2), (3,4), (5). The third update must use the
    # gradient of micro-batch 5 alone, not half of it (Accelerate halves it).
    dataset = make_regression_data(n=20)
    data = batches(dataset, 4)
    model = make_mlp(seed=3)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    source = dataset if kind == "map-style" else _Stream(dataset)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(source, batch_size=4))
    before_third = None
    step_grads = []
    for i, (x, y) in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
            if i == 4:
                before_third = params_of(model)
            if accelerator.sync_gradients:
                opt.step()  # finishes the gradients (rescaling a window of unknown length) before stepping
                step_grads.append(grads_of(model))
            opt.zero_grad()
    assert len(step_grads) == 3

    # The gradient of micro-batch 5 alone, at the weights the third update started from.
    with torch.no_grad():
        for p, w in zip(reference.parameters(), before_third):
            p.copy_(w)
    x5, y5 = data[4]
    F.mse_loss(reference(x5), y5).backward()
    for g, ref in zip(step_grads[2], grads_of(reference)):
        torch.testing.assert_close(g, ref, rtol=1e-6, atol=1e-7)
    for p, w, ref in zip(model.parameters(), before_third, grads_of(reference)):
        torch.testing.assert_close(p, w - ref, rtol=1e-6, atol=1e-7)  # SGD lr=1: the update is the gradient


def test_optimizer_scheduler_and_zero_grad_act_only_on_sync_micro_steps() -> None:
    dataset = make_regression_data(n=28)  # 7 micro-batches of 4, gas=3: updates on 3, 6 and 7 (end of loader)
    model = make_mlp(seed=4)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader, sched = accelerator.prepare(model, opt, make_loader(dataset, 4), _lambda_lr(opt))
    records = []
    for x, y in loader:
        with accelerator.accumulate(model):
            before = params_of(model)
            accelerator.backward(F.mse_loss(model(x), y))
            opt.step()
            sched.step()
            opt.zero_grad()
            changed = any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
            has_grad = all(p.grad is not None for p in model.parameters())
            records.append((accelerator.sync_gradients, changed, has_grad, sched.scheduler.last_epoch))
    assert records == [
        (False, False, True, 0), (False, False, True, 0), (True, True, False, 1),
        (False, False, True, 1), (False, False, True, 1), (True, True, False, 2),
        (True, True, False, 3),
    ]
    assert accelerator.step == 3


def test_end_of_prepared_loader_ends_the_window_and_the_next_epoch_starts_afresh() -> None:
    dataset = make_regression_data(n=24)  # 6 micro-batches of 4 with gas=4: windows of 4 and 2, in each epoch
    model = make_mlp(seed=5)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
    model, opt, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), make_loader(dataset, 4))
    syncs = []
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                syncs.append(accelerator.sync_gradients)
                opt.step()
                opt.zero_grad()
    window = [False, False, False, True, False, True]
    assert syncs == window + window  # a window never straddles two epochs
    assert accelerator.step == 4


def test_backward_with_num_items_gives_the_per_item_mean_over_ragged_batches() -> None:
    # One window of three ragged micro-batches (3, 5 and 4 items); the loss is a sum over items.
    dataset = make_regression_data(n=12)
    ragged = [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9, 10, 11]]
    model = make_mlp(seed=6)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(dataset, batch_sampler=ragged))
    for x, y in loader:
        with accelerator.accumulate(model):
            per_item = F.mse_loss(model(x), y, reduction="none").mean(dim=1)
            accelerator.backward(per_item.sum(), num_items=len(per_item))
            if accelerator.sync_gradients:
                opt.step()
                window_grads = grads_of(model)
            opt.zero_grad()

    x, y = dataset.tensors
    params = list(reference.parameters())
    # The mean of the three per-batch means weights the 3-item batch's items more: it must differ from the answer.
    mean_of_means = torch.autograd.grad(sum(F.mse_loss(reference(x[b]), y[b]) for b in ragged) / 3, params)
    ref_opt = torch.optim.SGD(params, lr=0.5)
    F.mse_loss(reference(x), y).backward()  # the per-item mean of the whole window as one batch
    expected = grads_of(reference)
    ref_opt.step()
    assert not torch.allclose(mean_of_means[0], expected[0], rtol=1e-3)
    for g, e in zip(window_grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_backward_with_num_items_without_accumulation_divides_each_step_by_its_own_count() -> None:
    dataset = make_regression_data(n=10)
    model = make_mlp(seed=7)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True)
    model, opt, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.3),
                                             DataLoader(dataset, batch_sampler=[[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.3)
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y, reduction="none").mean(dim=1).sum(), num_items=len(x))
            opt.step()
            opt.zero_grad()
        F.mse_loss(reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_prepare_returns_objects_in_order_and_passes_others_through() -> None:
    accelerator = Accelerator(cpu=True)
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = _lambda_lr(opt)
    loader = make_loader(make_regression_data(n=8), 4)
    other = {"not": "prepared"}
    # Deliberately out of the usual order: the scheduler and loader before the model and optimizer.
    p_sched, p_loader, p_other, p_model, p_opt = accelerator.prepare(sched, loader, other, model, opt)
    assert p_model is model  # one process: the user's own object, attribute access keeps working
    assert p_other is other
    assert type(p_opt).__name__ == "AcceleratedOptimizer" and p_opt.optimizer is opt
    assert type(p_sched).__name__ == "AcceleratedScheduler" and p_sched.scheduler is sched
    assert p_sched.optimizers == [p_opt]
    assert len(p_loader) == 2
    assert accelerator.prepare(model) is model  # a single object comes back alone, not in a tuple


def test_backward_outside_accumulate_divides_by_the_configured_steps_as_accelerate_does() -> None:
    x, y = make_regression_data(n=8).tensors
    model = make_mlp(seed=8)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(F.mse_loss(model(x), y))
    (F.mse_loss(reference(x), y) / 4).backward()
    for g, r in zip(grads_of(model), grads_of(reference)):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    assert accelerator.sync_gradients  # without accumulate() every step updates, as in Accelerate


def test_no_sync_in_one_process_lets_gradients_accumulate() -> None:
    x, y = make_regression_data(n=8).tensors
    model = make_mlp(seed=9)
    accelerator = Accelerator(cpu=True)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with accelerator.no_sync(model):
        accelerator.backward(F.mse_loss(model(x), y))
    first = grads_of(model)
    accelerator.backward(F.mse_loss(model(x), y))
    for g, f in zip(grads_of(model), first):
        torch.testing.assert_close(g, 2 * f)


def test_accumulate_without_a_prepared_loader_counts_micro_steps() -> None:
    data = batches(make_regression_data(n=20), 4)  # a plain list: the Accelerator cannot see where it ends
    model = make_mlp(seed=10)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    syncs = []
    for x, y in data:
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
            syncs.append(accelerator.sync_gradients)
            opt.step()
            opt.zero_grad()
    assert syncs == [False, True, False, True, False]  # the fifth micro-batch waits for a sixth
    assert accelerator.step == 2
