"""Loaders, a quiet Trainer and a checkpoint-at-batch callback for callback tests in real fits.

The module is ``tests.helpers.models.Regressor``: ``val_scores`` (one value per validation run) scripts the
``val/score`` metric that drives ModelCheckpoint / EarlyStopping deterministically, independent of how training goes.
"""

from __future__ import annotations

import os
from typing import Any

from torch.utils.data import DataLoader

from stoker import Callback, Trainer
from tests.helpers.models import make_loader, make_regression_data
from tests.helpers.trainers import asks_for_bar


def loaders(n: int = 32, batch_size: int = 8, shuffle: bool = True) -> tuple[DataLoader, DataLoader]:
    """(train, val) loaders: ``n / batch_size`` batches each (4 by default)."""
    data = make_regression_data(n)
    return make_loader(data, batch_size, shuffle=shuffle), make_loader(make_regression_data(16, seed=1), batch_size)


def trainer(root, **kw) -> Trainer:
    """A quiet Trainer under ``root``: no progress bar or logger unless asked, fixed seed."""
    kw.setdefault("enable_progress_bar", asks_for_bar(kw.get("callbacks")))
    kw.setdefault("logger", False)
    kw.setdefault("seed", 0)
    return Trainer(default_root_dir=str(root), **kw)


class SaveAt(Callback):
    """Saves a checkpoint ``{folder}/batch{n}`` after the chosen batches of the uninterrupted run (counted from 1 over
    the whole fit), for the exact-resume tests."""

    def __init__(self, folder: str, batches: set[int]) -> None:
        self.folder, self.batches, self.seen = folder, batches, 0

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        self.seen += 1
        if self.seen in self.batches:
            trainer.save_checkpoint(os.path.join(self.folder, f"batch{self.seen}"))
