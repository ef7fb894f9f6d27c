"""The accumulation window with summed losses (``backward(loss, num_items=n)``): fp16 range, exactness, resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from stoker import Accelerator
from tests.helpers import window_worker
from tests.helpers.dist_spawn import base_env
from tests.helpers.models import clone_model, make_mlp, make_regression_data
from tests.helpers.weights import grads_of, params_of
from tests.helpers.forkserver import run_python


def _wide_batches(steps: int, accumulate: int, items: int = 256) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of many items whose errors are of order 1: a *summed* squared error times GradScaler's initial
    65536 overflows fp16 in backward (2 * error * 65536 > 65504), the mean of the same batch does not."""
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(items, 8, generator=g), 3 * torch.randn(items, 2, generator=g))
            for _ in range(steps * accumulate)]


def _fp16_run(summed: bool, accumulate: int) -> tuple[int, list[torch.Tensor]]:
    """Trains fp16 on the same data with a mean loss or a summed loss + num_items; returns (skipped steps, weights)."""
    model = make_mlp(seed=11)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", gradient_accumulation_steps=accumulate)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    skipped = 0
    for x, y in _wide_batches(steps=6, accumulate=accumulate):
        with accelerator.accumulate(model):
            per_item = F.mse_loss(model(x), y, reduction="none").mean(dim=1)
            if summed:
                accelerator.backward(per_item.sum(), num_items=len(per_item))
            else:
                accelerator.backward(per_item.mean())
            opt.step()
            opt.zero_grad()
            skipped += accelerator.sync_gradients and accelerator.optimizer_step_was_skipped
    return skipped, params_of(model)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fp16_summed_loss_skips_no_more_steps_than_the_mean_loss(accumulate: int) -> None:
    skipped_mean, mean_weights = _fp16_run(summed=False, accumulate=accumulate)
    skipped_sum, sum_weights = _fp16_run(summed=True, accumulate=accumulate)
    assert skipped_mean == 0  # the data is in range for a mean loss...
    assert skipped_sum <= skipped_mean  # ...and so for the same loss summed over items
    # Equal batch sizes: the per-item mean of the window is the mean of the batch means, so both runs agree.
    for s, m in zip(sum_weights, mean_weights):
        torch.testing.assert_close(s, m, rtol=1e-3, atol=1e-4)


def _ragged_window_grads(mixed_precision: str) -> list[torch.Tensor]:
    """Gradients of one window of three ragged micro-batches of summed losses (3, 5 and 4 items), computed outside
    the model's autocast wrapper: in fp16 only the loss scale and the normaliser touch them."""
    x, y = make_regression_data(n=12).tensors
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-1, 1, 16).reshape(2, 8))
        model.bias.zero_()
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=3)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for batch in ([0, 1, 2], [3, 4, 5, 6, 7], [8, 9, 10, 11]):
        with accelerator.accumulate(model):
            out = F.linear(x[batch], model.weight, model.bias)  # full precision
            accelerator.backward(F.mse_loss(out, y[batch], reduction="none").mean(dim=1).sum(),
                                 num_items=len(batch))
    accelerator.unscale_gradients()
    return grads_of(model)


def test_fp16_normalisation_of_summed_losses_is_exact() -> None:
    # Loss scale and normaliser are powers of two and the correction multiplies by exactly what was divided: the
    # fp16 gradients of a window equal the full-precision ones bit for bit (a normaliser that was not a power of
    # two, or a wrong correction, would show here).
    for got, want in zip(_ragged_window_grads("fp16"), _ragged_window_grads("no")):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fp32_summed_loss_is_differentiated_as_given_and_divided_once_at_the_end() -> None:
    # The full-precision arithmetic is unchanged: backward of the sum, then one multiplication by 1/items.
    x, y = make_regression_data(n=8).tensors
    model = make_mlp(seed=12)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for batch in (slice(0, 3), slice(3, 8)):
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x[batch]), y[batch], reduction="sum"), num_items=len(x[batch]))
    accelerator.unscale_gradients()
    for batch in (slice(0, 3), slice(3, 8)):
        F.mse_loss(reference(x[batch]), y[batch], reduction="sum").backward()
    grads = [p.grad for p in reference.parameters()]
    torch._foreach_mul_(grads, 1 / torch.tensor(8.0))
    for got, want in zip(grads_of(model), grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_gradients_are_unscaled_once_whoever_asks_first() -> None:
    # clip, unscale_gradients and optimizer.step all finish the gradients; only the first of them unscales.
    x, y = make_regression_data(n=8).tensors
    model = torch.nn.Linear(8, 2)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(F.mse_loss(F.linear(x, model.weight, model.bias), y))
    accelerator.unscale_gradients()
    accelerator.unscale_gradients(opt)
    accelerator.clip_grad_value_(model.parameters(), 1e9)
    opt.step()
    F.mse_loss(reference(x), y).backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert not accelerator.optimizer_step_was_skipped


@pytest.mark.slow
def test_save_mid_window_with_summed_losses_resumes_exactly_in_a_new_process(tmp_path: Path) -> None:
    # Micro-batches of 1, 3, 2 and 5 items, accumulation 2; saved after the first micro-batch. The resumed window
    # must divide by 1 + 3 items (and, in fp16, by the normaliser the saved gradients were divided by).
    precisions = ("no", "fp16")
    expected = {p: window_worker.run(p) for p in precisions}
    for p in precisions:
        window_worker.run(p, save_to=str(tmp_path / p))
    proc = run_python([window_worker.__file__, str(tmp_path), *precisions], env=base_env(),
                      timeout=120)  # one start-up for both
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for p in precisions:
        resumed = torch.load(tmp_path / f"{p}.pt", weights_only=True)
        assert len(resumed) == len(expected[p])
        for got, want in zip(resumed, expected[p]):
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"mixed_precision={p!r}")
