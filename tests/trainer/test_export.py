"""``TrainingModule.to_onnx`` and ``to_torchscript`` (stoker/trainer/export.py): what they write is read back by
torch's and onnx's own tools and computes what the module computes; the mode is restored; missing inputs, methods
and packages get clear errors; and a Lightning script that exports runs the same under both frameworks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from stoker import Trainer, TrainingModule
from tests.trainer.test_manual_port import run_both


class Net(TrainingModule):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                       torch.nn.Linear(hidden, 2))
        self.example_input_array = torch.zeros(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        return self(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _expected(module: Net, x: torch.Tensor) -> torch.Tensor:
    module.eval()
    with torch.no_grad():
        out = module(x)
    module.train()
    return out


def test_to_torchscript_scripts_saves_and_restores_the_mode(tmp_path: Path) -> None:
    module = Net()
    x = torch.randn(5, 4)
    scripted = module.to_torchscript(tmp_path / "net.pt")
    assert module.training  # eval only while exporting
    expected = _expected(module, x)  # dropout off: the exported module is in eval mode
    assert torch.equal(scripted(x), expected)
    assert torch.equal(torch.jit.load(str(tmp_path / "net.pt"))(x), expected)
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):  # the scripting flag is gone again
        module.trainer


def test_to_torchscript_traces_on_the_example_input_or_the_given_one() -> None:
    module = Net()
    x = torch.randn(3, 4)
    assert torch.equal(module.to_torchscript(method="trace")(x), _expected(module, x))
    assert torch.equal(module.to_torchscript(method="trace", example_inputs=torch.ones(3, 4))(x),
                       _expected(module, x))


def test_export_after_fit_with_the_trainer_attached(tmp_path: Path) -> None:
    module = Net()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path).fit(module, data)
    x = torch.randn(2, 4)
    assert torch.equal(module.to_torchscript()(x), _expected(module, x))


def test_to_onnx_writes_a_model_onnx_runs_the_same(tmp_path: Path) -> None:
    import onnx
    from onnx.reference import ReferenceEvaluator

    module = Net()
    x = torch.randn(3, 4)
    module.to_onnx(tmp_path / "net.onnx")  # a Path, and the example_input_array as the sample
    assert module.training
    graph = onnx.load(str(tmp_path / "net.onnx"))
    onnx.checker.check_model(graph)
    (out,) = ReferenceEvaluator(graph).run(None, {graph.graph.input[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), _expected(module, x), rtol=1e-5, atol=1e-6)


def test_export_errors_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    module = Net()
    module.example_input_array = None
    with pytest.raises(ValueError, match="needs an example input.*example_input_array"):
        module.to_torchscript(method="trace")
    with pytest.raises(ValueError, match="needs an example input"):
        module.to_onnx("unused.onnx")
    with pytest.raises(ValueError, match=r"method='compile'.*'script'.*'trace'"):
        module.to_torchscript(method="compile")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install onnxscript"):
        module.to_onnx("unused.onnx", torch.zeros(1, 4))
    assert module.training


@pytest.mark.compat
def test_a_lightning_script_exports_the_same_under_both(tmp_path: Path) -> None:
    lightning, stoker = run_both(Path(__file__).with_name("lightning_export_script.py"), tmp_path)
    for result in (lightning, stoker):
        assert result["script"] and result["loaded"] and result["trace"] and result["onnx_close"], result
        assert result["training_after_export"] is True
    # Same seed, same data, same SGD steps, the same dropout masks (the loaders move the global RNG alike): the
    # same trained model, exported the same way.
    assert stoker["expected"] == lightning["expected"]
