"""Strategy objects in one process: parsing, configuration errors, FSDP's wrap policies, and FSDP2 on a
one-process group (an in-memory store: no port, no second process)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from stoker import Accelerator, DDPStrategy, FSDPStrategy
from stoker.accelerator.distributed.fsdp import _make_policy
from stoker.accelerator.distributed.strategy import SingleDevice, make_strategy
from tests.helpers.models import make_mlp


def test_unknown_strategy_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"strategy='dpp'.*'auto', 'ddp', 'fsdp', 'single'.*FSDPStrategy"):
        make_strategy("dpp")


def test_ddp_in_one_process_is_single_device() -> None:
    assert type(make_strategy("ddp", cpu=True)) is SingleDevice
    assert type(make_strategy("auto", cpu=True)) is SingleDevice


@pytest.mark.parametrize("bad", [-1, 0, "10s", True])
def test_ddp_timeout_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="DDPStrategy\\(timeout="):
        DDPStrategy(timeout=bad)


@pytest.mark.parametrize(("bad", "error"), [("group", ValueError), ("", ValueError), ("cpu:gloo,cuda:nccc", ValueError),
                                          (3, TypeError)])
def test_ddp_backend_is_checked_when_the_strategy_is_built(bad: object, error: type) -> None:
    # torch's own init_process_group answers an unknown name with a bare AssertionError, later
    with pytest.raises(error, match=r"DDPStrategy\(backend="):
        DDPStrategy(backend=bad)
    with pytest.raises(error, match=r"FSDPStrategy\(backend="):
        FSDPStrategy(backend=bad)
    assert DDPStrategy(backend="cpu:gloo,cuda:nccl").backend == "cpu:gloo,cuda:nccl"
    assert DDPStrategy(backend="gloo").backend == "gloo" and DDPStrategy().backend is None


def test_fsdp_policy_is_validated() -> None:
    with pytest.raises(TypeError, match=r"auto_wrap_policy=42.*set of module classes"):
        FSDPStrategy(auto_wrap_policy=42)
    with pytest.raises(TypeError, match="auto_wrap_policy"):
        FSDPStrategy(auto_wrap_policy=[nn.Linear, 3])


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)])
        self.head = nn.Linear(8, 2)


def _chosen(policy: object) -> list[str]:
    root, decide = Blocks(), _make_policy(policy)
    return [name for name, m in root.named_modules() if m is not root and decide(m, name, root)]


def test_fsdp_policies_choose_modules() -> None:
    assert _chosen(None) == ["layers.0", "layers.1", "layers.2"]  # the blocks of every ModuleList
    assert _chosen({nn.Linear}) == ["embed", "layers.0.0", "layers.1.0", "layers.2.0", "head"]
    assert _chosen({"Sequential"}) == ["layers.0", "layers.1", "layers.2"]
    assert _chosen(lambda m: isinstance(m, nn.Linear) and m.out_features == 2) == ["head"]


@pytest.fixture
def no_group() -> object:
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():  # a failed test must not leave a group behind for the others
        dist.destroy_process_group()


def test_fsdp_in_one_process_trains_like_one_device_and_tears_its_group_down(no_group: object) -> None:
    def run(strategy: str) -> tuple[Accelerator, list[torch.Tensor]]:
        accelerator = Accelerator(cpu=True, strategy=strategy)
        model = make_mlp(seed=3)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)  # built before prepare: remapped for FSDP
        model, optimizer = accelerator.prepare(model, optimizer)
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            x, y = torch.randn(8, 8, generator=g), torch.randn(8, 2, generator=g)
            accelerator.backward(F.mse_loss(model(x), y))
            accelerator.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            optimizer.zero_grad()
        return accelerator, [getattr(p, "full_tensor", p.detach)().detach().clone() for p in model.parameters()]

    _, reference = run("single")
    accelerator, sharded = run("fsdp")
    assert dist.is_initialized() and accelerator.num_processes == 1
    for a, b in zip(sharded, reference):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    accelerator.end_training()
    assert not dist.is_initialized()


def test_an_optimizer_that_already_stepped_cannot_follow_into_fsdp_shards(no_group: object) -> None:
    accelerator = Accelerator(cpu=True, strategy="fsdp")
    try:
        model = make_mlp(seed=3)
        optimizer = torch.optim.AdamW(model.parameters())
        model(torch.ones(1, 8)).sum().backward()
        optimizer.step()
        model = accelerator.prepare(model)
        with pytest.raises(RuntimeError, match="already has state"):
            accelerator.prepare(optimizer)
    finally:
        accelerator.end_training()
