"""Errors: each one names the bad value, says what was expected, and how to fix it."""

from __future__ import annotations

import re

import pytest
import torch

from stoker import Accelerator, ProjectConfiguration, set_seed
from tests.helpers.models import make_mlp


def test_unknown_precision_lists_the_choices() -> None:
    with pytest.raises(ValueError) as info:
        Accelerator(cpu=True, mixed_precision="fp17")
    message = str(info.value)
    assert "mixed_precision='fp17'" in message
    for choice in ("'no'", "'fp16'", "'bf16'", "'16-mixed'", "'bf16-mixed'", "'fp32'"):
        assert choice in message


def test_none_precision_means_full_precision_as_in_accelerate() -> None:
    assert Accelerator(cpu=True, mixed_precision=None).mixed_precision == "no"


@pytest.mark.parametrize("bad", [True, 16.0, ["fp16"]])
def test_precision_of_a_wrong_type_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"mixed_precision={bad!r}")):
        Accelerator(cpu=True, mixed_precision=bad)


@pytest.mark.parametrize("bad", [0, -2])
def test_gradient_accumulation_steps_below_one(bad: int) -> None:
    with pytest.raises(ValueError) as info:
        Accelerator(cpu=True, gradient_accumulation_steps=bad)
    message = str(info.value)
    assert f"gradient_accumulation_steps={bad}" in message and ">= 1" in message
    assert "1 means no accumulation" in message


@pytest.mark.parametrize("bad", [2.0, "2", True])  # None means "the launcher's setting, else 1" (test_cli.py)
def test_gradient_accumulation_steps_that_is_not_an_int(bad: object) -> None:
    with pytest.raises(TypeError) as info:
        Accelerator(cpu=True, gradient_accumulation_steps=bad)
    message = str(info.value)
    assert f"gradient_accumulation_steps={bad!r}" in message
    assert "must be an int" in message and type(bad).__name__ in message
    assert "gradient_accumulation_steps=4" in message  # an example of a correct call


def test_backward_before_prepare_says_to_prepare_first() -> None:
    accelerator = Accelerator(cpu=True)
    model = make_mlp()
    loss = model(torch.randn(2, 8)).sum()
    with pytest.raises(RuntimeError, match=r"before prepare\(\).*accelerator\.prepare\(") as info:
        accelerator.backward(loss)
    assert "backward()" in str(info.value)
    assert all(p.grad is None for p in model.parameters())  # nothing ran


class _Stateful:
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class _HalfStateful:
    def state_dict(self) -> dict:
        return {}


def test_register_for_checkpointing_rejects_objects_without_state_methods() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(TypeError) as info:
        accelerator.register_for_checkpointing(_Stateful(), 3, _HalfStateful())
    message = str(info.value)
    assert "#1 (int)" in message and "#2 (_HalfStateful)" in message and "#0" not in message
    assert "state_dict()" in message and "load_state_dict(" in message
    assert "leave it out" in message  # how to fix
    accelerator.register_for_checkpointing(_Stateful())  # a proper object is accepted


def test_bad_strategy_name_lists_the_choices() -> None:
    with pytest.raises(ValueError) as info:
        Accelerator(cpu=True, strategy="horovod")
    message = str(info.value)
    assert "strategy='horovod'" in message
    for choice in ("'auto'", "'ddp'", "'fsdp'"):
        assert choice in message


@pytest.mark.parametrize(("argument", "fix"), [("project_config", "ProjectConfiguration("),
                                               ("dataloader_config", "DataLoaderConfiguration(")])
def test_configuration_of_the_wrong_type(argument: str, fix: str) -> None:
    with pytest.raises(TypeError) as info:
        Accelerator(cpu=True, **{argument: {"project_dir": "x"}})
    message = str(info.value)
    assert f"Accelerator({argument}=...)" in message and "got dict" in message and fix in message


def test_prepare_with_a_device_placement_list_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="1 objects but device_placement has 2 entries.*one bool per object"):
        Accelerator(cpu=True).prepare(make_mlp(), device_placement=[True, False])


def test_other_bad_values() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match=r"skip_first_batches\(num_batches=-1\)"):
        accelerator.skip_first_batches([], -1)
    with pytest.raises(ValueError, match=r"reduce\(reduction='avg'\).*'sum', 'mean' or 'none'"):
        accelerator.reduce(torch.ones(1), "avg")
    with pytest.raises(TypeError, match=r"set_seed\(seed='1'\) needs an int.*set_seed\(42\)"):
        set_seed("1")
    with pytest.raises(TypeError, match="split_between_processes takes a list.*got set.*list\\(inputs\\)"):
        with accelerator.split_between_processes({1, 2}):
            pass
    with pytest.raises(ValueError, match=r"ProjectConfiguration\(total_limit=0\)"):
        ProjectConfiguration(total_limit=0)
