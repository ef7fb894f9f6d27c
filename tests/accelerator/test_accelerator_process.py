"""One process: device choice, process properties, process control and collectives, unwrap_model, set_seed."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from stoker import Accelerator, set_seed
from stoker.accelerator.distributed import strategy as strategy_module
from tests.helpers.models import Regressor, make_mlp


# -- device choice ---------------------------------------------------------------------------------------------------
def _fake_hardware(monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if cuda else 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(("cuda", "mps", "expected"), [(True, True, "cuda:0"), (False, True, "mps"),
                                                       (False, False, "cpu")])
def test_device_prefers_cuda_then_mps_then_cpu(monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool,
                                               expected: str) -> None:
    _fake_hardware(monkeypatch, cuda, mps)
    assert Accelerator().device == torch.device(expected)


def test_cpu_true_forces_cpu_even_with_an_accelerator_present(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_hardware(monkeypatch, cuda=True, mps=True)
    accelerator = Accelerator(cpu=True)
    assert accelerator.device == torch.device("cpu")
    model = accelerator.prepare(make_mlp())
    assert next(model.parameters()).device == torch.device("cpu")


def test_local_rank_picks_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_hardware(monkeypatch, cuda=True, mps=False)
    assert strategy_module.default_device(local_rank=3) == torch.device("cuda", 1)  # 2 GPUs: rank 3 -> cuda:1


# -- process properties and control ----------------------------------------------------------------------------------
def test_one_process_values() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == 1
    assert accelerator.process_index == 0
    assert accelerator.local_process_index == 0
    assert accelerator.is_main_process and accelerator.is_local_main_process
    assert accelerator.use_distributed is False
    assert accelerator.sync_gradients is True
    assert accelerator.gradient_accumulation_steps == 1
    assert accelerator.mixed_precision == "no"
    assert accelerator.step == 0
    assert accelerator.optimizer_step_was_skipped is False


def test_print_wait_and_main_process_first(capsys: pytest.CaptureFixture[str]) -> None:
    accelerator = Accelerator(cpu=True)
    accelerator.print("hello", 3, sep="-")
    accelerator.wait_for_everyone()
    order = []
    with accelerator.main_process_first():
        order.append("main")
    with accelerator.local_main_process_first():
        order.append("local")
    assert order == ["main", "local"]
    assert capsys.readouterr().out == "hello-3\n"


def test_gather_reduce_and_pad_are_identities_in_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    t = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(accelerator.gather(t), t)
    assert torch.equal(accelerator.gather(torch.tensor(5.0)), torch.tensor([5.0]))  # scalars gather to 1-D
    nested = accelerator.gather({"a": t, "b": [torch.tensor(1)]})
    assert torch.equal(nested["a"], t) and torch.equal(nested["b"][0], torch.tensor([1]))
    for reduction in ("sum", "mean", "none"):
        assert torch.equal(accelerator.reduce(t, reduction), t)
    assert torch.equal(accelerator.reduce(t, "sum", scale=2.0), 2 * t)
    assert torch.equal(accelerator.pad_across_processes(t, dim=1, pad_index=-1), t)
    assert torch.equal(accelerator.gather_for_metrics(t), t)


@pytest.mark.parametrize("inputs", [[1, 2, 3], ("a", "b"), torch.arange(5), {"x": [1, 2], "y": torch.ones(2)}])
def test_split_between_processes_yields_everything_in_one_process(inputs: object) -> None:
    accelerator = Accelerator(cpu=True)
    with accelerator.split_between_processes(inputs, apply_padding=True) as mine:
        assert mine is inputs


# -- unwrap_model ---------------------------------------------------------------------------------------------------
def test_unwrap_model_returns_the_users_module() -> None:
    model = Regressor()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    prepared = accelerator.prepare(model)
    assert prepared.net is model.net  # attribute access works on the prepared model
    assert accelerator.unwrap_model(prepared) is model


def test_unwrap_model_removes_torch_compile() -> None:
    # Only wraps: nothing is compiled until the first call, so this costs dynamo's import, not a compilation.
    model = Regressor()
    accelerator = Accelerator(cpu=True)
    compiled = accelerator.prepare(torch.compile(model))
    assert compiled is not model
    assert accelerator.unwrap_model(compiled) is model
    assert accelerator.unwrap_model(compiled, keep_torch_compile=True) is compiled


def test_unwrap_model_keep_fp32_wrapper_false_removes_the_autocast_forward() -> None:
    model = Regressor()
    seen = []
    model.net[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    prepared = accelerator.prepare(model)
    prepared(torch.randn(2, 8))
    kept = accelerator.unwrap_model(prepared)
    kept(torch.randn(2, 8))
    bare = accelerator.unwrap_model(prepared, keep_fp32_wrapper=False)
    out = bare(torch.randn(2, 8))
    assert seen == [torch.bfloat16, torch.bfloat16, torch.float32]
    assert bare is model and out.dtype == torch.float32
    assert "forward" not in model.__dict__  # back to the class's forward


# -- set_seed -------------------------------------------------------------------------------------------------------
def _draw() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_set_seed_makes_python_numpy_and_torch_repeatable() -> None:
    set_seed(123)
    first = _draw()
    set_seed(123)
    assert _draw() == first
    set_seed(124)
    assert _draw() != first


def test_set_seed_deterministic_turns_on_deterministic_algorithms() -> None:
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        set_seed(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(previous)


def test_set_seed_fixes_the_shuffle_of_a_prepared_loader() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(32))

    def epoch_orders() -> list[list[int]]:
        set_seed(7)
        loader = Accelerator(cpu=True).prepare(torch.utils.data.DataLoader(data, batch_size=8, shuffle=True))
        return [torch.cat([b[0] for b in loader]).tolist() for _ in range(2)]

    first = epoch_orders()
    assert first == epoch_orders()
    assert first[0] != first[1]  # a new epoch, a new order
    assert sorted(first[0]) == list(range(32))
