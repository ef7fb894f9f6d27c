"""Preparing twice, a new precision on a module another precision prepared, clipping arguments, the precision parser."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from stoker import Accelerator
from stoker.accelerator import parse_precision
from tests.helpers.models import make_mlp, make_regression_data


def _forward_dtype(model: torch.nn.Module) -> tuple[torch.dtype, torch.dtype]:
    """(dtype of the first layer's output, dtype the model returns) for one forward."""
    seen = []
    handle = model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    try:
        out = model(torch.randn(2, 8))
    finally:
        handle.remove()
    return seen[0], out.dtype


@pytest.mark.parametrize(("first", "second", "dtype"), [("bf16", "fp16", torch.float16),
                                                        ("fp16", "bf16", torch.bfloat16),
                                                        ("bf16", "no", torch.float32)])
def test_a_new_precision_replaces_the_autocast_of_an_earlier_prepare(first: str, second: str,
                                                                     dtype: torch.dtype) -> None:
    model = make_mlp()
    Accelerator(cpu=True, mixed_precision=first).prepare(model)
    Accelerator(cpu=True, mixed_precision=second).prepare(model)
    assert _forward_dtype(model) == (dtype, torch.float32)
    if second == "no":
        assert "forward" not in model.__dict__  # full precision: no wrapper left at all


def test_preparing_a_model_twice_returns_it_without_registering_it_again() -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    p_model, p_opt, p_sched = accelerator.prepare(model, optimizer, scheduler)
    again = accelerator.prepare(model, optimizer, scheduler)
    assert again == (p_model, p_opt, p_sched)
    assert accelerator.prepare(p_model) is p_model and accelerator.prepare(p_opt) is p_opt
    assert accelerator.prepare_model(model, evaluation_mode=True) is p_model
    assert len(accelerator._models) == 1 and len(accelerator._optimizers) == 1 and len(accelerator._schedulers) == 1
    # Registered once: save_state/load_state see one model and one optimizer.
    assert accelerator._checkpoint_contents().counters()["step"] == 0


def test_preparing_twice_rearms_autocast_that_was_removed() -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    accelerator.prepare(model)
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert _forward_dtype(model) == (torch.float32, torch.float32)
    assert accelerator.prepare(model) is model
    assert _forward_dtype(model) == (torch.bfloat16, torch.float32)


def test_prepare_model_without_the_autocast_wrapper_leaves_forward_alone() -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    accelerator.prepare_model(model)  # an earlier preparation put the wrapper on
    assert accelerator.prepare_model(model, autocast_forward=False) is model
    assert "forward" not in model.__dict__
    assert _forward_dtype(model) == (torch.float32, torch.float32)
    with accelerator.autocast():  # the caller's one mechanism: autocast around its step
        assert model(torch.randn(2, 8)).dtype == torch.bfloat16


def test_true_half_precision_converts_without_the_autocast_wrapper_too() -> None:
    model = make_mlp()
    Accelerator(cpu=True, mixed_precision="bf16-true").prepare_model(model, autocast_forward=False)
    assert _forward_dtype(model) == (torch.bfloat16, torch.bfloat16)


def test_wait_for_checkpoints_is_a_method(tmp_path) -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.wait_for_checkpoints()  # nothing in flight: returns at once
    accelerator.save_state(tmp_path / "ckpt", async_save=True)
    accelerator.wait_for_checkpoints()
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()


@pytest.mark.parametrize("bad", [0, -1.0, math.nan])
def test_clip_grad_norm_needs_a_positive_max_norm(bad: float) -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True)
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = make_regression_data(n=4).tensors
    accelerator.backward(F.mse_loss(model(x), y))
    with pytest.raises(ValueError, match=r"clip_grad_norm_\(max_norm=.*\): max_norm must be > 0.*float\('inf'\)"):
        accelerator.clip_grad_norm_(model.parameters(), bad)


@pytest.mark.parametrize("bad", [0, -0.5, math.nan])
def test_clip_grad_value_needs_a_positive_clip_value(bad: float) -> None:
    model = make_mlp()
    accelerator = Accelerator(cpu=True)
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = make_regression_data(n=4).tensors
    accelerator.backward(F.mse_loss(model(x), y))
    with pytest.raises(ValueError, match=r"clip_grad_value_\(clip_value=.*\): clip_value must be > 0"):
        accelerator.clip_grad_value_(model.parameters(), bad)


def test_the_precision_parser_is_public_and_shared_with_the_trainer() -> None:
    assert [parse_precision(v) for v in ("fp32", "16-mixed", "bf16-mixed", None, 32)] == ["no", "fp16", "bf16", "no",
                                                                                            "no"]
    with pytest.raises(ValueError, match=r"Trainer\(precision='fp17'\) is not a precision"):
        parse_precision("fp17", argument="Trainer(precision=...)")
