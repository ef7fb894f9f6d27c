"""A Lightning 2.x script that trains a small model and exports it the three ways Lightning offers: ``to_onnx``
(read back and run with onnx's reference evaluator), ``to_torchscript()`` (scripted, saved, loaded back with
``torch.jit.load``) and ``to_torchscript(method="trace")`` on its ``example_input_array``. The compat test runs it
under pytorch_lightning and, with its imports renamed, under stoker, and compares what it prints."""

import json
import os
import sys
import warnings

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Model(pl.LightningModule):
    def __init__(self, hidden=8):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Dropout(0.25), nn.Linear(hidden, 1))
        self.example_input_array = torch.zeros(2, 4)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(out):
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
    model = Model()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=out)
    trainer.fit(model, loader)
    probe = torch.linspace(-1, 1, 8).reshape(2, 4)
    model.eval()
    with torch.no_grad():
        expected = model(probe)
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's and Lightning's deprecation notices for TorchScript
        scripted = model.to_torchscript(os.path.join(out, "model.pt"))
        traced = model.to_torchscript(method="trace")
    still_training = model.training
    loaded = torch.jit.load(os.path.join(out, "model.pt"))
    # Lightning exports ONNX in the module's current mode (torch's exporter records training-mode dropout since
    # torch 2.9); stoker exports in eval mode. In eval mode, as deployments want, both agree.
    model.eval()
    model.to_onnx(os.path.join(out, "model.onnx"), probe)

    import onnx
    from onnx.reference import ReferenceEvaluator

    graph = onnx.load(os.path.join(out, "model.onnx"))
    onnx.checker.check_model(graph)
    (onnx_out,) = ReferenceEvaluator(graph).run(None, {graph.graph.input[0].name: probe.numpy()})
    print(json.dumps({
        "expected": expected.flatten().tolist(),
        "script": torch.equal(scripted(probe), expected),
        "loaded": torch.equal(loaded(probe), expected),
        "trace": torch.equal(traced(probe), expected),
        "onnx_close": bool(abs(torch.from_numpy(onnx_out) - expected).max() < 1e-5),
        "training_after_export": still_training,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
