"""Mixed precision on CPU: fp16 (autocast + GradScaler, skipped steps), bf16, autocast(), and gradient clipping."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stoker import Accelerator
from tests.helpers.models import clone_model, make_loader, make_mlp, make_regression_data
from tests.helpers.weights import grads_of, params_of


def _train(mixed_precision: str, steps: int = 24) -> list[float]:
    dataset = make_regression_data(n=64)
    model = make_mlp(seed=0)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model, opt, loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.02),
                                             make_loader(dataset, 16))
    losses = []
    while len(losses) < steps:
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("mixed_precision", ["fp16", "bf16"])
def test_mixed_precision_trains_on_cpu(mixed_precision: str) -> None:
    losses = _train(mixed_precision)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-4:]) < 0.5 * sum(losses[:4])


@pytest.mark.parametrize(("mixed_precision", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_prepared_forward_runs_in_low_precision_and_returns_float32(mixed_precision: str, dtype: torch.dtype) -> None:
    model = make_mlp()
    seen = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model = accelerator.prepare(model)
    out = model(torch.randn(4, 8))
    assert seen == [dtype]  # the matmul ran under autocast
    assert out.dtype == torch.float32  # so a loss computed outside the model runs in full precision


def test_full_precision_forward_is_not_wrapped() -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    prepared = accelerator.prepare(model)
    assert "forward" not in prepared.__dict__  # no per-call wrapper cost in fp32


@pytest.mark.parametrize(("mixed_precision", "dtype"), [("no", torch.float32), ("fp16", torch.float16),
                                                        ("bf16", torch.bfloat16)])
def test_autocast_context_uses_the_configured_dtype(mixed_precision: str, dtype: torch.dtype) -> None:
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with accelerator.autocast():
        assert (a @ b).dtype == dtype
    assert (a @ b).dtype == torch.float32


@pytest.mark.parametrize(("alias", "name"), [("fp32", "no"), ("32", "no"), ("16-mixed", "fp16"),
                                             ("bf16-mixed", "bf16"), ("FP16", "fp16"), ("no", "no")])
def test_precision_aliases(alias: str, name: str) -> None:
    assert Accelerator(cpu=True, mixed_precision=alias).mixed_precision == name


def test_fp16_step_with_inf_gradient_is_skipped_leaving_weights_and_lr_unchanged() -> None:
    dataset = make_regression_data(n=32)
    model = make_mlp(seed=1)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + s))
    model, opt, loader, sched = accelerator.prepare(model, opt, make_loader(dataset, 8), sched)
    scaler = accelerator.precision.scaler
    for i, (x, y) in enumerate(loader):
        # Scaled down so that no step overflows on its own at the initial scale: only the injected inf does.
        accelerator.backward(0.01 * F.mse_loss(model(x), y))
        before, lr_before, scale_before = params_of(model), sched.get_last_lr(), scaler.get_scale()
        if i == 1:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        opt.step()
        sched.step()
        opt.zero_grad()
        unchanged = all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
        if i == 1:
            assert accelerator.optimizer_step_was_skipped
            assert unchanged
            assert sched.get_last_lr() == lr_before
            assert accelerator.step == 1
        else:
            assert not accelerator.optimizer_step_was_skipped
            assert not unchanged
            assert sched.get_last_lr() != lr_before
        if i == 2:  # the overflow halved the scale before this step's backward
            assert scale_before == 0.5 * 65536.0
    assert accelerator.step == 3
    assert sched.scheduler.last_epoch == 3


def test_fp16_weights_match_fp32_reference_when_gradients_are_exactly_unscaled() -> None:
    # GradScaler's scale is a power of two: unscaling is exact. With the forward in full precision the fp16
    # run must then match a plain fp32 step, which it would not if gradients were unscaled twice or never.
    model = torch.nn.Linear(8, 2)
    reference = clone_model(model)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = make_regression_data(n=8).tensors
    loss = F.mse_loss(F.linear(x, model.weight, model.bias), y)  # the same function, computed in full precision
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1e9)  # unscales
    accelerator.clip_grad_norm_(model.parameters(), 1e9)  # must not unscale again
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    F.mse_loss(reference(x), y).backward()
    ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def _scaled_backward(accelerator: Accelerator, model: torch.nn.Module) -> list[torch.Tensor]:
    """Runs one backward and returns the true (unscaled) gradients, read before the Accelerator touches them."""
    x, y = make_regression_data(n=16).tensors
    # Small enough that the first fp16 step does not overflow at GradScaler's initial scale of 2**16.
    accelerator.backward(0.01 * F.mse_loss(model(x), y))
    scale = accelerator.precision.scaler.get_scale() if accelerator.mixed_precision == "fp16" else 1.0
    if accelerator.mixed_precision == "fp16":
        assert scale > 1.0  # gradients really are scaled at this point
    true_grads = [g / scale for g in grads_of(model)]
    assert all(torch.isfinite(g).all() for g in true_grads)
    return true_grads


@pytest.mark.parametrize("mixed_precision", ["no", "fp16"])
def test_clip_grad_norm_matches_torch_on_unscaled_gradients(mixed_precision: str) -> None:
    model = make_mlp(seed=2)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    true_grads = _scaled_backward(accelerator, model)
    before = params_of(model)
    copies = [torch.nn.Parameter(torch.zeros_like(g)) for g in true_grads]
    for c, g in zip(copies, true_grads):
        c.grad = g.clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(copies, 0.01)
    assert expected_norm > 0.01  # clipping really happens

    norm = accelerator.clip_grad_norm_(model.parameters(), 0.01)
    torch.testing.assert_close(norm, expected_norm)
    again = accelerator.clip_grad_norm_(model.parameters(), 0.01)  # unscale exactly once: now ~max_norm
    torch.testing.assert_close(again, torch.nn.utils.clip_grad_norm_(copies, 0.01))
    torch.testing.assert_close(again, torch.tensor(0.01), rtol=1e-4, atol=0)
    opt.step()
    assert not accelerator.optimizer_step_was_skipped
    for p, b, c in zip(model.parameters(), before, copies):
        torch.testing.assert_close(p, b - c.grad, rtol=1e-5, atol=1e-7)  # SGD lr=1 applied the clipped gradient


@pytest.mark.parametrize("mixed_precision", ["no", "fp16"])
def test_clip_grad_value_matches_torch_on_unscaled_gradients(mixed_precision: str) -> None:
    model = make_mlp(seed=3)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    true_grads = _scaled_backward(accelerator, model)
    clip = 0.5 * max(g.abs().max().item() for g in true_grads)  # clips the largest elements, not all
    expected = [g.clamp(-clip, clip) for g in true_grads]
    before = params_of(model)
    accelerator.clip_grad_value_(model.parameters(), clip)
    for g, e in zip(grads_of(model), expected):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=0)
    opt.step()
    for p, b, e in zip(model.parameters(), before, expected):
        torch.testing.assert_close(p, b - e, rtol=1e-5, atol=1e-7)


def test_clipping_is_skipped_on_micro_steps_that_do_not_update_weights() -> None:
    model = make_mlp(seed=4)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, opt, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                             make_loader(make_regression_data(n=16), 8))
    norms = []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(100 * F.mse_loss(model(x), y))
            partial = grads_of(model)
            norms.append(accelerator.clip_grad_norm_(model.parameters(), 1e-3))
            if not accelerator.sync_gradients:  # incomplete gradients are not clipped
                assert all(torch.equal(g, p) for g, p in zip(grads_of(model), partial))
            opt.step()
            opt.zero_grad()
    assert norms[0] is None and norms[1] is not None and norms[1] > 1e-3


def test_grad_scaler_state_round_trips() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    state = accelerator.precision.state_dict()
    state["scaler"]["scale"] = 1024.0
    other = Accelerator(cpu=True, mixed_precision="fp16")
    other.precision.load_state_dict(state)
    assert other.precision.scaler.get_scale() == 1024.0


def test_preparing_a_model_twice_wraps_its_forward_once() -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    accelerator.prepare(model)
    accelerator.prepare(model)
    seen = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    assert model(torch.randn(2, 8)).dtype == torch.float32 and seen == [torch.bfloat16]
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    model(torch.randn(2, 8))
    assert seen[-1] == torch.float32 and "forward" not in model.__dict__


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_a_precision_without_a_loss_scale_keeps_the_plain_scale_unscale_and_step() -> None:
    # backward, the window's finish and AcceleratedOptimizer.step skip these three calls when scales_loss is False
    # (the hot path): a precision that overrides one of them must say scales_loss = True.
    import stoker.accelerator.distributed.fsdp  # noqa: F401  (any precision class defined there is a subclass too)
    from stoker.accelerator.step.precision import Precision

    classes = [Precision, *_subclasses(Precision)]
    assert len(classes) >= 5  # full, mixed, bf16, fp16, true half precision
    for cls in classes:
        overridden = [name for name in ("scale_loss", "unscale_", "step")
                      if getattr(cls, name) is not getattr(Precision, name)]
        assert cls.scales_loss == bool(overridden), (cls.__name__, overridden)


def test_fp16_still_scales_the_loss_and_steps_through_the_scaler() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model = make_mlp()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    calls = []
    precision = accelerator.precision
    for name in ("scale_loss", "unscale_", "step"):
        original = getattr(precision, name)
        setattr(precision, name, lambda *a, _n=name, _f=original, **k: (calls.append(_n), _f(*a, **k))[1])
    with accelerator.accumulate(model):
        accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    assert calls == ["scale_loss", "unscale_", "step"] and accelerator.step == 1
