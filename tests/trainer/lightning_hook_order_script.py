"""A Lightning 2.x script that records, in order, every hook call of a module and of a callback through a fit
(Lightning's defaults: the sanity check included), a validate, a test and a predict. The compat test runs it under
pytorch_lightning and, with only the package renamed, under stoker, and compares the two lists call for call.

Each call is recorded when it returns, as Lightning's own hook-order tests do (``optimizer_step`` wraps the
closure that runs ``training_step``, so its return comes after the step's). Only the names and the few arguments
that say where the loop is (batch index, stage) are recorded: the objects differ between the two frameworks.
"""

import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl

OUT = sys.argv[1]
calls = []

MODULE_HOOKS = (
    "setup", "teardown", "configure_optimizers", "configure_callbacks", "prepare_data",
    "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_train_batch_start", "on_train_batch_end", "on_validation_start", "on_validation_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start",
    "on_test_batch_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_validation_model_eval", "on_validation_model_train",
    "on_test_model_eval", "on_test_model_train", "on_predict_model_eval", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad", "optimizer_zero_grad", "optimizer_step", "lr_scheduler_step",
    "configure_gradient_clipping", "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
    "training_step", "validation_step", "test_step", "predict_step", "on_save_checkpoint", "on_load_checkpoint",
)
CALLBACK_HOOKS = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start",
    "on_train_batch_end", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
    "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end", "on_test_start",
    "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start", "on_test_batch_end",
    "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad", "on_save_checkpoint", "on_load_checkpoint",
)


def where(name, args, kwargs):
    """What a call says about the loop's position: a stage, a batch index, a dataloader index."""
    if name in ("setup", "teardown"):
        return [kwargs.get("stage", args[-1] if args else None)]
    if name.endswith("_batch_start") or name.endswith("_batch_end") or name.endswith("_step") and "optimizer" not in \
            name and name != "lr_scheduler_step":
        ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        return ints[:1]
    return []


def recording(owner, name, fn):
    def hook(*args, **kwargs):
        out = fn(*args, **kwargs)
        rest = args[2:] if owner == "cb" else args  # a callback's trainer and module are left out
        calls.append([owner, name, *where(name, rest, kwargs)])
        return out
    return hook


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        for name in MODULE_HOOKS:
            if hasattr(self, name):
                setattr(self, name, recording("module", name, getattr(self, name)))

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        return self(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val", self(batch[0]).pow(2).mean())

    def test_step(self, batch, batch_idx):
        self.log("test", self(batch[0]).pow(2).mean())

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]

    def _loader(self, seed):
        return DataLoader(TensorDataset(torch.randn(12, 4, generator=torch.Generator().manual_seed(seed))),
                          batch_size=4)

    def train_dataloader(self):
        return self._loader(0)

    def val_dataloader(self):
        return self._loader(1)

    def test_dataloader(self):
        return self._loader(2)

    def predict_dataloader(self):
        return self._loader(3)


class Recorder(pl.Callback):
    def __init__(self):
        for name in CALLBACK_HOOKS:
            setattr(self, name, recording("cb", name, getattr(self, name)))


pl.seed_everything(0)
model = Model()
trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=2, accelerator="cpu", devices=1,
                     callbacks=[Recorder()], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=OUT)
trainer.fit(model)
fit_calls, calls[:] = list(calls), []
trainer.validate(model, verbose=False)
validate_calls, calls[:] = list(calls), []
trainer.test(model, verbose=False)
test_calls, calls[:] = list(calls), []
trainer.predict(model)
predict_calls, calls[:] = list(calls), []
# A fresh module: accumulation over an uneven epoch (windows of 2 and 1), clipping, no sanity check.
trainer = pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=1, accumulate_grad_batches=2,
                     gradient_clip_val=0.5, num_sanity_val_steps=0, accelerator="cpu", devices=1,
                     callbacks=[Recorder()], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=OUT)
trainer.fit(Model())
print(json.dumps({"fit": fit_calls, "validate": validate_calls, "test": test_calls, "predict": predict_calls,
                  "fit, accumulating": list(calls)}))
