"""Two ranks, one NaN loss on rank 1 only: every rank must take the same decision (raise / skip) at the same step.

Usage: ``nonfinite_worker.py OUT_DIR MODE`` (mode: "raise" or "skip"); writes ``rank{r}.json``.
"""

from __future__ import annotations

import sys
import warnings

import dist_common as common
import torch

from stoker import Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


class NaNOnRank1(Regressor):
    """The Regressor (SGD, lr 0.05, momentum 0.9) whose loss is NaN on rank 1 at epoch 0, batch 1; nothing logged."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.trainer.accelerator.process_index == 1 and self.trainer.current_epoch == 0 and batch_idx == 1:
            loss = loss * float("nan")
        return loss


out_dir, mode = sys.argv[1], sys.argv[2]
trainer = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                  enable_model_summary=False, on_nonfinite_loss=mode, accelerator="cpu")
module = NaNOnRank1()
result: dict = {"mode": mode}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        trainer.fit(module, make_loader(make_regression_data(n=64), batch_size=8))  # 4 batches per rank per epoch
    except ValueError as error:
        result["error"] = str(error)
result["warnings"] = [str(w.message) for w in caught if "not finite" in str(w.message)]
result["global_step"] = trainer.global_step
result["finite"] = all(bool(torch.isfinite(p).all()) for p in module.parameters())
result["weights"] = common.flat(module)
common.write_result(out_dir, result)
trainer.accelerator.end_training()
