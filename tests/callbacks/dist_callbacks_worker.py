"""Two ranks that see *different* metric values (logged without sync_dist) and different clocks; then a predict run
whose writer checks each batch's ``batch_indices`` against the batch (each rank gets its own share).

Usage: ``dist_callbacks_worker.py OUT``. ModelCheckpoint, EarlyStopping and Timer must decide the same on both
ranks; otherwise one rank would wait forever in a collective (save_state, the loop) the other never enters.
ModelPruning with a random method must draw the same masks on both ranks, and a fit resumed from a checkpoint saved
in the middle of an epoch must end with the same (pruned) weights. Writes ``rank{r}.json``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from stoker import BasePredictionWriter, Callback, EarlyStopping, ModelCheckpoint, Timer, Trainer  # noqa: E402
from tests.helpers.dist_common import write_result  # noqa: E402
from stoker.callbacks import ModelPruning  # noqa: E402
from tests.helpers.models import Regressor, make_loader, make_regression_data  # noqa: E402

OUT = Path(sys.argv[1])
RANK = int(os.environ["RANK"])
# Rank 0's score keeps improving, rank 1's gets worse faster: their mean peaks at epoch 1 and then worsens.
SCORES = {0: [4.0, 3.0, 2.5, 2.2, 2.0, 1.9], 1: [4.0, 1.0, 3.0, 4.0, 5.0, 6.0]}


class Module(Regressor):
    """The Regressor trained by plain SGD (lr 0.01); its only metric is ``score``, which differs per rank."""

    def __init__(self) -> None:
        super().__init__(lr=0.01, momentum=0.0)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        self.log("score", SCORES[RANK][self.trainer.current_epoch])  # no sync_dist: differs per rank


class SlowRank1(Callback):
    """Rank 1's clock runs past the Timer's duration first."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if RANK == 1 and trainer.global_step == 9:
            time.sleep(2.2)


def fit(root: Path, callbacks: list) -> Trainer:
    trainer = Trainer(max_epochs=6, default_root_dir=str(root), logger=False, enable_progress_bar=False, seed=0,
                      callbacks=callbacks)
    data = make_regression_data(64)
    trainer.fit(Module(), make_loader(data, 8), make_loader(data, 8))  # 4 steps per epoch and rank
    return trainer


class Rows(Module):
    def predict_step(self, batch, batch_idx):
        return batch[0]


class IndexWriter(BasePredictionWriter):
    """Each sample of the predict data is its own row number, so a batch must hold exactly its batch_indices."""

    def __init__(self) -> None:
        super().__init__("batch")
        self.indices: list[int] = []
        self.matched = True

    def write_on_batch_end(self, trainer, module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.matched &= prediction.squeeze(-1).tolist() == [float(i) for i in batch_indices]
        self.indices += batch_indices


def predict_indices() -> tuple[bool, list[int]]:
    writer = IndexWriter()
    trainer = Trainer(logger=False, enable_progress_bar=False, seed=0, callbacks=[writer])
    rows = torch.utils.data.TensorDataset(torch.arange(10.0).unsqueeze(-1))
    trainer.predict(Rows(), torch.utils.data.DataLoader(rows, batch_size=3, shuffle=True))
    matched = trainer.accelerator.gather(torch.tensor([float(writer.matched)]))
    return bool(matched.all()), trainer.accelerator.gather(torch.tensor(writer.indices)).tolist()


class SaveAtStep6(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 6:
            trainer.save_checkpoint(OUT / "pruned" / "step6.ckpt")


def pruned(root: Path, extra: list, ckpt: str | None = None) -> list[float]:
    """A fit pruned at each epoch's end by a random method (the ranks draw alike from the same seed)."""
    module = Module()
    pruning = ModelPruning("random_unstructured", amount=0.3, make_pruning_permanent=False)
    trainer = Trainer(max_epochs=3, default_root_dir=str(root), logger=False, enable_progress_bar=False, seed=0,
                      enable_checkpointing=False, callbacks=[pruning, *extra])
    trainer.fit(module, make_loader(make_regression_data(64), 8), ckpt_path=ckpt)
    return [float(v) for t in module.state_dict().values() for v in t.reshape(-1)]


ckpt = ModelCheckpoint(save_last=True, monitor="score", save_top_k=1, filename="{epoch}")
stop = EarlyStopping("score", patience=2)
first = fit(OUT / "stop", [ckpt, stop])
timer = Timer({"seconds": 2})
second = fit(OUT / "timer", [SlowRank1(), timer])
write_result(OUT, {
    "best": os.path.basename(ckpt.best_model_path), "best_score": float(ckpt.best_model_score),
    "stopped_epoch": stop.stopped_epoch, "steps": first.global_step,
    "timer_steps": second.global_step, "timer_stopped": timer.stopped,
    "predict": predict_indices(),
    "pruned_whole": pruned(OUT / "pruned", [SaveAtStep6()]),
    "pruned_resumed": pruned(OUT / "resumed", [], str(OUT / "pruned" / "step6.ckpt")),
})
