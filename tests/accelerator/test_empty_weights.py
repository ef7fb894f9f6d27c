"""``init_empty_weights`` / ``init_on_device``: parameters on the meta device, buffers kept (or not), and
``prepare`` refusing an empty model until it is loaded."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from stoker import Accelerator, init_empty_weights, init_on_device


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))


def test_parameters_are_on_meta_and_buffers_keep_their_values() -> None:
    with init_empty_weights():
        net = _net()
        frozen = nn.Linear(2, 2)
        frozen.weight.requires_grad_(False)
    assert all(p.is_meta for p in net.parameters())
    assert net[0].weight.shape == (4, 3) and net[0].weight.dtype == torch.float32
    assert isinstance(net[0].weight, nn.Parameter) and net[0].weight.requires_grad
    assert net[1].running_var.device.type == "cpu" and torch.equal(net[1].running_var, torch.ones(4))
    assert not nn.Linear(2, 2).weight.is_meta  # the patch is gone after the block


def test_include_buffers_puts_buffers_on_meta_too(monkeypatch: pytest.MonkeyPatch) -> None:
    with init_empty_weights(include_buffers=True):
        net = _net()
    assert all(t.is_meta for t in [*net.parameters(), *net.buffers()])
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")  # Accelerate's default from the environment
    with init_empty_weights():
        assert _net()[1].running_mean.is_meta
    assert not torch.empty(1).is_meta


def test_the_patch_is_undone_when_the_block_raises() -> None:
    with pytest.raises(ZeroDivisionError), init_on_device("meta"):
        raise ZeroDivisionError
    assert nn.Linear(2, 2).weight.device.type == "cpu"


def test_prepare_refuses_an_empty_model_and_takes_it_once_loaded() -> None:
    weights = _net().state_dict()
    with init_empty_weights():
        empty = _net()
    with pytest.raises(ValueError, match=r"meta device \('0.weight', '0.bias', '1.weight' and 3 more\).*assign=True"):
        Accelerator().prepare(empty)

    empty.load_state_dict(weights, assign=True)  # the loaded tensors become the parameters
    other = _net()
    other.to_empty(device="cpu")  # storage without values, then the values
    other.load_state_dict(_net().state_dict())  # (not `weights`: torch's assign=True above marked its metadata)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    results = []
    for model in (empty, other, _net()):
        accelerator = Accelerator()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        results.append(model.state_dict())
    for name, want in results[2].items():
        torch.testing.assert_close(results[0][name], want, rtol=0, atol=0)
        torch.testing.assert_close(results[1][name], want, rtol=0, atol=0)


def test_a_transformers_model_from_a_tiny_config() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    with init_empty_weights():
        model = transformers.AutoModel.from_config(config)
    params = dict(model.named_parameters())
    assert params and all(p.is_meta for p in params.values())
    assert all(not b.is_meta for b in model.buffers())  # e.g. position_ids, with their values
    with pytest.raises(ValueError, match="meta device"):
        Accelerator().prepare(model)
