"""``trainer.fit(torch.compile(module))``, Lightning's documented way to compile: the Trainer runs the module itself
with its forward compiled (the compiler is called; weights match an uncompiled run), and validate/test/predict
and a second fit take the same compiled wrapper. Uses the ``eager`` dynamo backend plus a counting backend: the
default inductor backend needs a C++ toolchain on CPU."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from stoker import Trainer, TrainingModule


class Regressor(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def trainer(tmp_path: Any) -> Trainer:
    return Trainer(max_epochs=2, default_root_dir=str(tmp_path), logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)


def test_fit_a_compiled_module_runs_its_compiled_forward(tmp_path: Any) -> None:
    calls: list[int] = []

    def counting(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        calls.append(len(example_inputs))
        return graph.forward

    plain = Regressor()
    trainer(tmp_path / "plain").fit(plain, loader(), loader())
    module = Regressor()
    compiled = torch.compile(module, backend=counting)
    t = trainer(tmp_path / "compiled")
    t.fit(compiled, loader(), loader())
    assert calls, "the compiler was never called: the steps did not run the compiled forward"
    assert t.lightning_module is module and t.global_step == 8
    for a, b in zip(plain.parameters(), module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    forward = module.forward
    assert t.validate(compiled, loader())[0]["val_loss"] >= 0
    assert len(t.predict(compiled, loader())) == 4
    t2 = trainer(tmp_path / "again")
    t2.fit(compiled, loader())  # the same wrapper: the forward is not compiled twice
    assert module.forward is forward and t2.global_step == 8
    assert "_stoker_compiled_by" not in dict(module.named_modules())  # no cycle in the module tree


def test_a_compiled_plain_module_is_refused_by_name() -> None:
    import pytest

    with pytest.raises(TypeError, match="expects a stoker.TrainingModule, got OptimizedModule"):
        Trainer(logger=False).fit(torch.compile(nn.Linear(2, 2), backend="eager"), loader())
