"""``stoker.utilities.find_shared_parameters`` / ``set_shared_parameters`` (Lightning's ``parameter_tying``)."""

from __future__ import annotations

import torch
from torch import nn

from stoker.utilities import find_shared_parameters, set_shared_parameters
from stoker.utilities.parameter_tying import find_shared_parameters as on_its_path


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8, bias=False)
        self.hidden = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4, bias=False)
        self.out.weight = self.embed.weight  # not the same shape in a real model; tying only needs the object


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)
        self.a = nn.Sequential(self.layer)
        self.b = nn.Sequential(self.layer)


def test_finds_each_tied_parameter_under_all_its_names() -> None:
    assert find_shared_parameters(nn.Linear(2, 2)) == []
    assert find_shared_parameters(Tied()) == [["embed.weight", "out.weight"]]
    assert on_its_path(Shared()) == [["layer.weight", "a.0.weight", "b.0.weight"], ["layer.bias", "a.0.bias", "b.0.bias"]]


class NestedTie(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(3, 3)
        self.dec = nn.Sequential(nn.ReLU(), nn.Linear(3, 3))
        self.dec[1].weight = self.enc.weight
        self.dec[1].bias = self.enc.bias


def test_ties_copies_again_to_the_first_names_parameter() -> None:
    model = NestedTie()
    shared = find_shared_parameters(model)
    assert shared == [["enc.weight", "dec.1.weight"], ["enc.bias", "dec.1.bias"]]
    model.dec[1].weight = nn.Parameter(model.enc.weight.detach().clone())  # what a copy to another device leaves
    model.dec[1].bias = nn.Parameter(torch.zeros(3))
    assert find_shared_parameters(model) == []
    assert set_shared_parameters(model, shared) is model
    assert model.dec[1].weight is model.enc.weight and model.dec[1].bias is model.enc.bias
    assert find_shared_parameters(model) == shared
    assert set_shared_parameters(Tied(), [[]]) is not None  # an empty group ties nothing
