"""One rank of the combined-train-loader resume runs (``tests/distributed/test_resume_combined.py``).

Usage: ``resume_combined_worker.py OUT PHASE``. Each run fits on a ``CombinedLoader`` of two shuffled DataLoaders
(40 and 24 samples, ``max_size_cycle``: 5 steps an epoch at a global batch of 8, the shorter loader starting again
in each) with a checkpoint every 2 steps, and writes, per rank, each step's sample ids, the final weights and the
warnings of the resume to ``{OUT}/{run}-rank{r}.json``. Phases: ``"two"`` (2 processes: the uninterrupted fit, then
fits resumed from two of its mid-epoch checkpoints), ``"one"`` (1 process: resumed from those checkpoints with the
same global batch and with the same batch per process, and uninterrupted fits to resume on 2), ``"two-again"``
(2 processes: resumed from the 1-process checkpoints).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import ModelCheckpoint, Trainer, TrainingModule
from stoker.trainer import CombinedLoader
from tests.helpers import dist_common as common

# (run as a script: the repo is importable through the PYTHONPATH that dist_spawn.base_env sets)

OUT, PHASE = Path(sys.argv[1]), sys.argv[2]
PROCESSES = int(os.environ["WORLD_SIZE"])


def data(n: int, first_id: int) -> TensorDataset:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True), torch.arange(first_id, first_id + n))


class Net(TrainingModule):
    """Records the sample ids of every step."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.steps: list[list] = []

    def training_step(self, batch, batch_idx):
        x, y, ids = (torch.cat([part[i] for part in batch.values()]) for i in range(3))
        self.steps.append([self.trainer.global_step, self.trainer.current_epoch, ids.tolist()])
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def fit(run: str, batch_size: int, ckpt_path: str | None = None, every: int = 2) -> None:
    loaders = CombinedLoader({"a": DataLoader(data(40, 0), batch_size=batch_size, shuffle=True),
                              "b": DataLoader(data(24, 1000), batch_size=batch_size, shuffle=True)}, "max_size_cycle")
    trainer = Trainer(devices=PROCESSES, accelerator="cpu", max_epochs=2, seed=0, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(OUT / run),
                      callbacks=[ModelCheckpoint(dirpath=str(OUT / run / "ck"), filename="{step}", save_top_k=-1,
                                                 every_n_train_steps=every)])
    module = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, loaders, ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    resume_warnings = [str(w.message) for w in caught if "Resuming in the middle" in str(w.message)]
    common.write_result(OUT, {"steps": module.steps, "weights": common.flat(module), "warnings": resume_warnings},
                        f"{run}-rank{common.rank()}.json")


def checkpoint(run: str, step: int) -> str:
    return str(OUT / run / "ck" / f"step={step}.ckpt")


def main() -> None:
    if PHASE == "two":  # global batch 8 (4 on each process)
        fit("whole2", 4)
        for step in (4, 8):  # epoch 0 after the shorter loader started again; epoch 1, batch 3
            fit(f"whole2-{step}-on2", 4, checkpoint("whole2", step))
    elif PHASE == "one":
        for step in (4, 8):
            fit(f"whole2-{step}-on1", 8, checkpoint("whole2", step))  # the same global batch: the same steps
        fit("whole2-4-on1-batch4", 4, checkpoint("whole2", 4))  # the same batch per process: 8 steps of 4 done
        fit("whole1", 8)
        fit("whole1b", 4, every=3)
    else:
        fit("whole1-6-on2", 4, checkpoint("whole1", 6))
        fit("whole1b-3-on2", 4, checkpoint("whole1b", 3))  # 12 samples of each loader: 1.5 steps of 8: warned


if __name__ == "__main__":
    main()
