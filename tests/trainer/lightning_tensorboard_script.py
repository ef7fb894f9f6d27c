"""A Lightning 2.x script that logs to TensorBoard both ways users do: ``self.log`` (scalars every
``log_every_n_steps`` and per epoch) and ``self.logger.experiment`` (the ``SummaryWriter``: a histogram and a text
per epoch, a scalar of its own), with ``save_hyperparameters`` (the HPARAMS tab and Lightning's ``hp_metric``
placeholder) and ``log_graph=True`` (the module traced on its ``example_input_array``). The compat test runs it under pytorch_lightning and, with its imports renamed,
under stoker; the script reads its event files back with TensorBoard's own ``EventAccumulator`` and prints what
it finds."""

import json
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger


class Model(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(4, 1)
        self.example_input_array = torch.zeros(2, 4)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def on_train_epoch_end(self):
        writer = self.logger.experiment
        writer.add_histogram("weight", self.layer.weight.detach(), self.current_epoch)
        writer.add_text("note", f"epoch {self.current_epoch} done", self.current_epoch)
        writer.add_scalar("custom/epoch_times_two", 2.0 * self.current_epoch, self.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(out):
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    logger = TensorBoardLogger(out, name="tb", log_graph=True)
    trainer = pl.Trainer(max_epochs=3, logger=logger, log_every_n_steps=4, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    model = Model()
    trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
    # Lightning's way back to a module: the checkpoint plus the logger's hparams.yaml.
    trainer.save_checkpoint(os.path.join(out, "final.ckpt"))
    loaded = Model.load_from_checkpoint(os.path.join(out, "final.ckpt"),
                                        hparams_file=os.path.join(logger.log_dir, "hparams.yaml"))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logger.log_dir, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    start = HParamsPluginData.FromString(events.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    scalars = {tag: [(e.step, round(e.value, 5)) for e in events.Scalars(tag)] for tag in sorted(tags["scalars"])}
    print(json.dumps({
        "scalars": scalars,
        "histograms": {tag: [e.step for e in events.Histograms(tag)] for tag in sorted(tags["histograms"])},
        "texts": sorted(t for t in tags["tensors"] if t.startswith("note")),
        "hparams": {k: v.number_value for k, v in start.session_start_info.hparams.items()},
        "graph": bool(tags["graph"]) and len(events.Graph().node) > 0,
        "loaded": {"lr": loaded.hparams.lr, "same_weights": all(torch.equal(a, b) for a, b in
                                                                 zip(loaded.state_dict().values(),
                                                                     model.state_dict().values()))},
    }))


if __name__ == "__main__":
    main(sys.argv[1])
