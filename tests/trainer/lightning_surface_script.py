"""An ordinary Lightning 2.x script that reads the Trainer's and the module's everyday attributes after fit
(metrics dicts, callbacks, ranks, batch counts, hparams, test/validate/predict, load_from_checkpoint) and steps a
ReduceLROnPlateau by hand as Lightning's manual-optimization docs show. The compat test runs it under
pytorch_lightning and, with only the package renamed, under stoker, and compares what it prints."""

import json
import os
import sys

import torch
import torchmetrics
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

OUT = sys.argv[1]
results = {}

def check(name, fn):
    try:
        results[name] = fn()
    except Exception as e:
        results[name] = f"ERROR {type(e).__name__}: {e}"[:200]

class Model(pl.LightningModule):
    def __init__(self, lr=0.05, hidden=16):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 3))
        self.acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        self.example_input_array = torch.zeros(2, 4)
        self.validation_step_outputs = []
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log_dict({"train_loss": loss, "train_acc": self.acc(logits, y)}, prog_bar=True, on_step=True,
                      on_epoch=True)
        return loss
    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.validation_step_outputs.append(loss)
        self.log("val_loss", loss, prog_bar=True)
        return loss
    def on_validation_epoch_end(self):
        mean = torch.stack(self.validation_step_outputs).mean()
        self.log("val_mean", mean)
        self.validation_step_outputs.clear()
    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())
    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0]).argmax(1)
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}
    def on_train_epoch_end(self):
        self.print(f"epoch {self.current_epoch} step {self.global_step} rank {self.global_rank} "
                   f"device {self.device.type}")

class Recorder(pl.Callback):  # a user's callback: reads outputs["loss"], logs through the module
    def __init__(self):
        self.outputs = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.outputs.append(sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__)
        pl_module.log("cb_loss", outputs["loss"], on_step=False, on_epoch=True)

    def on_validation_epoch_end(self, trainer, pl_module):
        pl_module.log("cb_val", float(trainer.current_epoch))


g = torch.Generator().manual_seed(0)
x = torch.randn(120, 4, generator=g); y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16)  # (shuffle orders differ by design)
val = DataLoader(TensorDataset(x[96:], y[96:]), batch_size=16)
pl.seed_everything(0)
model = Model()
recorder = Recorder()
ckpt = ModelCheckpoint(dirpath=os.path.join(OUT, "ck"), filename="{epoch}-{val_loss:.2f}", monitor="val_loss",
                       save_top_k=2)
trainer = pl.Trainer(max_epochs=4, callbacks=[ckpt, EarlyStopping(monitor="val_loss", patience=3),
                                              LearningRateMonitor(), recorder],
                     logger=CSVLogger(OUT), accelerator="cpu", devices=1, log_every_n_steps=2,
                     enable_progress_bar=False, enable_model_summary=True)
trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
check("global_step", lambda: trainer.global_step)
check("current_epoch", lambda: trainer.current_epoch)
check("callback_metrics", lambda: sorted(trainer.callback_metrics))
check("logged_metrics", lambda: sorted(trainer.logged_metrics))
check("progress_bar_metrics", lambda: sorted(trainer.progress_bar_metrics))
check("best_model_score", lambda: round(float(ckpt.best_model_score), 4))
check("best_name", lambda: os.path.basename(ckpt.best_model_path).removesuffix(".ckpt"))
check("logger.version", lambda: trainer.logger.version)
check("hparams", lambda: dict(model.hparams))
check("lr_schedulers", lambda: type(model.lr_schedulers()).__name__)
check("num_training_batches", lambda: trainer.num_training_batches)
check("num_val_batches", lambda: trainer.num_val_batches)
check("estimated_stepping_batches", lambda: trainer.estimated_stepping_batches)
check("is_global_zero", lambda: trainer.is_global_zero)
check("world_size", lambda: trainer.world_size)
check("test", lambda: sorted(trainer.test(model, dataloaders=val, verbose=False)[0]))
check("predict", lambda: [t.shape[0] for t in trainer.predict(model, dataloaders=val)])
check("validate", lambda: sorted(trainer.validate(model, dataloaders=val, verbose=False)[0]))
check("load_from_checkpoint", lambda: Model.load_from_checkpoint(ckpt.best_model_path).hparams.hidden)
check("state.stage", lambda: str(trainer.state.stage))
check("should_stop", lambda: trainer.should_stop)
check("max_epochs", lambda: trainer.max_epochs)
check("early_stopping_callback", lambda: type(trainer.early_stopping_callback).__name__)
check("checkpoint_callbacks", lambda: len(trainer.checkpoint_callbacks))
check("lightning_module", lambda: trainer.lightning_module is model)
check("model", lambda: trainer.model is model)  # one process: the module itself (no wrapper)
check("model.trainer", lambda: model.trainer is trainer)
# stoker adds run_summary.json (the closing line's facts) to the run's folder; every other file is Lightning's.
check("csv files", lambda: sorted(set(os.listdir(trainer.log_dir)) - {"run_summary.json"}))
check("callback outputs", lambda: recorder.outputs[:2])
check("module ranks", lambda: [model.global_rank, model.local_rank])
check("trainer ranks", lambda: [trainer.global_rank, trainer.local_rank, trainer.node_rank, trainer.num_devices])
check("device_ids", lambda: trainer.device_ids)


class Manual(Model):  # Lightning's manual-optimization docs: step a ReduceLROnPlateau yourself
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log("loss", loss)

    def on_train_epoch_end(self):
        sch = self.lr_schedulers()
        if isinstance(sch, torch.optim.lr_scheduler.ReduceLROnPlateau):
            sch.step(self.trainer.callback_metrics["loss"] * 0 + 1.0)  # never improves: the lr drops


pl.seed_everything(0)
manual = Manual()
manual_trainer = pl.Trainer(max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
manual_trainer.fit(manual, train_dataloaders=train, val_dataloaders=val)
check("manual plateau lr", lambda: manual.optimizers().param_groups[0]["lr"])
print(json.dumps(results))
