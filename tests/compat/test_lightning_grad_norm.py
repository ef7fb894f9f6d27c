"""``grad_norm`` (Lightning's ``utilities.grads``): per-parameter and total gradient norms, on the device, loggable."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from stoker.utilities import grad_norm
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(3))
        self.b = nn.Parameter(torch.zeros(2, 1))
        self.frozen = nn.Parameter(torch.zeros(1))  # no gradient: left out
        self.a.grad = torch.tensor([-1.0, 2.0, -3.0])
        self.b.grad = torch.tensor([[-4.0], [5.0]])


@pytest.mark.parametrize(("norm_type", "a", "b", "total"), [
    (1, 6.0, 9.0, 15.0),
    (2, 14 ** 0.5, 41 ** 0.5, 55 ** 0.5),
    ("inf", 3.0, 5.0, 5.0),
    (3.5, (1 + 2 ** 3.5 + 3 ** 3.5) ** (1 / 3.5), (4 ** 3.5 + 5 ** 3.5) ** (1 / 3.5),
     (1 + 2 ** 3.5 + 3 ** 3.5 + 4 ** 3.5 + 5 ** 3.5) ** (1 / 3.5)),
])
def test_each_gradient_and_all_of_them_as_one_vector(norm_type, a, b, total):
    norms = grad_norm(Two(), norm_type)
    name = f"grad_{float(norm_type)}_norm"
    assert list(norms) == [f"{name}/a", f"{name}/b", f"{name}_total"]
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in norms.values())  # tensors: no host read
    assert [float(v) for v in norms.values()] == pytest.approx([a, b, total])
    dotted = ["grad_2.0_norm.a", "grad_2.0_norm.b", "grad_2.0_norm_total"]
    assert list(grad_norm(Two(), 2, group_separator=".")) == dotted


def test_bad_norms_and_no_gradients():
    for bad in (0, -1, "two", None):
        with pytest.raises(ValueError, match="must be a positive number or 'inf'"):
            grad_norm(Two(), bad)
    assert grad_norm(nn.Linear(2, 2), 2) == {}


def test_a_float64_gradient_does_not_overflow_the_total():
    layer = nn.Linear(1, 1).double()
    layer.weight.grad = torch.full((1, 1), 1e23, dtype=torch.float64)
    total = grad_norm(layer, 2)["grad_2.0_norm_total"]
    assert total.dtype == torch.float64 and float(total) == pytest.approx(1e23)


def test_logged_from_on_before_optimizer_step(tmp_path):
    from stoker.loggers import CSVLogger

    class Logged(Regressor):
        def on_before_optimizer_step(self, optimizer: Any) -> None:
            self.log_dict(grad_norm(self, norm_type=2))

    module = Logged()
    logger = CSVLogger(str(tmp_path), name="run")
    trainer(tmp_path, max_epochs=1, logger=logger, log_every_n_steps=1).fit(module, loaders()[0])
    import csv

    rows = list(csv.DictReader(open(tmp_path / "run" / "version_0" / "metrics.csv")))
    assert len(rows) == 4 and float(rows[0]["grad_2.0_norm_total"]) > 0
    assert {"grad_2.0_norm/net.0.weight", "grad_2.0_norm_total"} <= set(rows[0])


def test_lightning_module_path():
    from stoker.utilities.grads import grad_norm as from_path

    assert from_path is grad_norm
