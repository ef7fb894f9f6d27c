"""ModelCheckpoint and EarlyStopping ignore the sanity check's validation (``num_sanity_val_steps``).

The sanity check runs a few validation batches on untrained weights before the first step; its metrics are
dropped before training. A checkpoint written then (``save_on_train_epoch_end=False`` saves at validation's end)
would be a step-0 copy of the initial weights, and an early-stopping check would rank a score training never made.
"""

from __future__ import annotations

import os

from stoker import EarlyStopping, ModelCheckpoint

from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


def _fit(tmp_path, callback, sanity: int) -> None:
    data, val = make_regression_data(n=32), make_regression_data(n=16)
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=sanity, callbacks=[callback],
                            enable_checkpointing=True, default_root_dir=tmp_path)
    trainer.fit(Regressor(), make_loader(data, batch_size=8), make_loader(val, batch_size=8))  # returns committed


def test_model_checkpoint_saves_nothing_at_the_sanity_check(tmp_path) -> None:
    saved = {}
    for sanity in (0, 2):  # the same checkpoints with and without a sanity check
        folder = tmp_path / f"sanity{sanity}"
        ckpt = ModelCheckpoint(dirpath=folder, monitor="val/loss", save_top_k=3, save_on_train_epoch_end=False)
        _fit(tmp_path / f"root{sanity}", ckpt, sanity)
        saved[sanity] = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    assert saved[0] and not any("step=0" in n for n in saved[2]), saved
    assert saved[2] == saved[0]


def test_early_stopping_does_not_rank_the_sanity_check(tmp_path) -> None:
    stop = EarlyStopping(monitor="val/loss", patience=0)
    _fit(tmp_path, stop, sanity=2)
    reference = EarlyStopping(monitor="val/loss", patience=0)
    _fit(tmp_path / "ref", reference, sanity=0)
    assert stop.best_score == reference.best_score and stop.wait_count == reference.wait_count == 0
