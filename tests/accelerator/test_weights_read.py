"""read_state_dict: exported weights read whole, as one state dict (what load_from_checkpoint hands to a module's
own load_state_dict)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from stoker import Accelerator
from stoker.accelerator import read_state_dict


class TiedPair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(6, 6)
        self.decode = nn.Linear(6, 6)
        self.decode.weight = self.encode.weight  # stored once by save_model


@pytest.mark.parametrize("max_shard_size", ["10GB", 200], ids=["one-file", "sharded"])
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_every_name_of_the_model_comes_back_with_its_values(tmp_path: Any, max_shard_size: Any, safe: bool) -> None:
    model = TiedPair()
    Accelerator(cpu=True).save_model(model, tmp_path, max_shard_size=max_shard_size, safe_serialization=safe)
    state = read_state_dict(tmp_path)
    assert sorted(state) == sorted(model.state_dict())  # the tied alias under its own name too
    for name, value in model.state_dict().items():
        assert torch.equal(state[name], value) and state[name].device.type == "cpu"
    fresh = TiedPair()
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.decode.weight, model.encode.weight)


def test_a_compiled_part_is_read_under_its_plain_names(tmp_path: Any) -> None:
    model = nn.Sequential(nn.Linear(3, 3))
    prefixed = {f"0._orig_mod.{k.split('.', 1)[1]}": v for k, v in model.state_dict().items()}
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in prefixed.items()}, str(tmp_path / "model.safetensors"))
    assert sorted(read_state_dict(tmp_path)) == ["0.bias", "0.weight"]
