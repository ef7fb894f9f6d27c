"""A 2-process Trainer run for ``tests/distributed/test_trainer.py``. Usage: ``dist_trainer_worker.py OUT MODE``.

MODE: ``full`` (started as a plain ``python`` process: ``Trainer(devices=2)`` launches the two workers itself),
``sigterm`` (rank 1 receives SIGTERM after optimizer step 4), ``resume`` (``fit(ckpt_path="last")``), ``die``
(rank 1 dies abruptly after step 2) and ``fsdp`` (the full run with ``strategy="fsdp"``).
Each worker writes ``rank{r}-{MODE}.json``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from stoker import Callback, CSVLogger, Trainer, TrainingModule
from stoker.compat.accelerate.state import distributed_type_of  # Accelerate's name for the strategy in use
from tests.helpers.models import make_mlp, make_regression_data

OUT, MODE = Path(sys.argv[1]), sys.argv[2]
ROOT = OUT / {"sigterm": "run_preempted", "resume": "run_preempted"}.get(MODE, f"run_{MODE}")


class Regressor(TrainingModule):
    def __init__(self) -> None:
        import torchmetrics  # here, not at the top: the launching process of "full" never builds the module

        super().__init__()
        self.net = torch.nn.Sequential(make_mlp(seed=7), torch.nn.Dropout(0.2))
        self.val_mse = torchmetrics.MeanSquaredError()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train/loss", loss, on_epoch=True, sync_dist=True)
        rank = float(self.trainer.accelerator.process_index)
        self.log("rank_synced", rank, on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_local", rank, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        x, y = batch
        self.val_mse.update(self(x), y)
        self.log("val/mse", self.val_mse)

    def configure_optimizers(self) -> tuple:
        opt = torch.optim.AdamW(self.parameters(), lr=0.02)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


class Trigger(Callback):
    """Rank 1 gets SIGTERM (or dies) right after optimizer step ``at``."""

    def __init__(self, at: int, action: str) -> None:
        self.at, self.action = at, action

    def on_train_batch_end(self, trainer: Trainer, module: TrainingModule, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at and trainer.accelerator.process_index == 1 and trainer.accelerator.sync_gradients:
            if self.action == "die":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGTERM)
            self.action = "done"


class CountingCSVLogger(CSVLogger):
    """Counts the ``after_save_checkpoint`` calls this process gets (Lightning: the main process only)."""

    saves_heard = 0

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        self.saves_heard += 1


def main() -> None:
    callbacks = [Trigger(4, "sigterm")] if MODE == "sigterm" else [Trigger(2, "die")] if MODE == "die" else []
    logger = CountingCSVLogger(ROOT)
    trainer = Trainer(devices=2, accelerator="cpu", max_epochs=2, accumulate=2, seed=0, default_root_dir=ROOT,
                      logger=logger, callbacks=callbacks, enable_progress_bar=False, log_every_n_steps=1,
                      strategy="fsdp" if MODE == "fsdp" else "auto")
    module = Regressor()
    train = DataLoader(make_regression_data(n=48), batch_size=4, shuffle=True)
    val = DataLoader(make_regression_data(n=16, seed=1), batch_size=4)
    result: dict = {"pid": os.getpid(), "rank": trainer.accelerator.process_index,
                    "world": trainer.accelerator.num_processes, "strategy": distributed_type_of(trainer.accelerator.strategy)}
    try:
        trainer.fit(module, train, val, ckpt_path="last" if MODE == "resume" else None)
    except SystemExit as exit_:
        result["exit"] = exit_.code
        result["stopped_at"] = trainer.global_step
        common.write_result(OUT, result, f"rank{result['rank']}-{MODE}.json")
        raise
    result["global_step"] = trainer.global_step
    result["saves_heard"] = logger.saves_heard
    result["experiment"] = type(trainer.logger.experiment).__name__  # another process's: a DummyExperiment
    result["log_dir"] = trainer.log_dir  # read after the main process created its version folder
    result["weights"] = common.flat(trainer.accelerator.unwrap_model(module))
    metrics = trainer.callback_metrics
    for key in ("rank_synced", "rank_local", "val/mse", "train/loss_epoch"):
        result[key] = float(metrics[key])
    # torchmetrics synced: the metric over the whole validation set, the same on both processes.
    result["validate"] = trainer.validate(module, val)[0]["val/mse"]
    with torch.no_grad():
        x, y = make_regression_data(n=16, seed=1).tensors
        module.eval()
        result["val_mse_full"] = float(F.mse_loss(module(x), y)) if MODE != "fsdp" else None
    result["lr"] = trainer.optimizers[0].param_groups[0]["lr"]
    if MODE == "full":  # the module's all_gather: stacked per process, and with sync_grads a gradient back
        rank = trainer.accelerator.process_index
        gathered = module.all_gather({"rank": rank, "row": torch.tensor([rank, 10.0 * rank])})
        result["gathered"] = {k: v.tolist() for k, v in gathered.items()}
        x = torch.tensor([rank + 1.0], requires_grad=True)
        (module.all_gather(x, sync_grads=True) * torch.tensor([[1.0], [3.0]])).sum().backward()
        result["gather_grad"] = x.grad.tolist()
    if MODE == "fsdp":  # weights back from the sharded checkpoint, into the fit's module and into a fresh one
        result["validate_ckpt"] = trainer.validate(module, val, ckpt_path="last")[0]["val/mse"]
        result["validate_fresh"] = trainer.validate(Regressor(), val, ckpt_path="last")[0]["val/mse"]
    common.write_result(OUT, result, f"rank{result['rank']}-{MODE}.json")


if __name__ == "__main__":
    main()
