"""``Precision.autocast_calls``: the precision wraps a step function once, instead of the caller asking per step."""

from __future__ import annotations

import torch

from stoker.accelerator.step.precision import make_precision


def _step(x: torch.Tensor) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled("cpu"), (x @ x).dtype


def test_full_precision_hands_back_the_function_itself() -> None:
    precision = make_precision("no", torch.device("cpu"))
    assert precision.autocast_calls(_step) is _step  # nothing added to the hot path


def test_mixed_precision_runs_each_call_under_its_autocast() -> None:
    precision = make_precision("bf16", torch.device("cpu"))
    wrapped = precision.autocast_calls(_step)
    assert wrapped(torch.ones(2, 2)) == (True, torch.bfloat16)
    assert _step(torch.ones(2, 2)) == (False, torch.float32)  # outside it, nothing changed
