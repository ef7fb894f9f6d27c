"""A train loader that keeps no position (any iterable that is not a DataLoader, or a ``CombinedLoader`` holding
one) is read again from its start when a fit resumes in the middle of an epoch: the resume says so, instead of
passing for exact. (A ``CombinedLoader`` of DataLoaders alone resumes exactly: ``test_resume_exact_paths.py``.)"""

from __future__ import annotations

import os
import warnings

import pytest

from stoker import ModelCheckpoint
from stoker.trainer import CombinedLoader
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Batches:
    """An iterable of batches that is not a DataLoader (it keeps no position)."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)

    def __len__(self):
        return len(self.loader)


class TwoLoaders(Regressor):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch["a"], batch_idx) + super().training_step(batch["b"], batch_idx)


def fit(root, ckpt_path=None):
    data = make_regression_data(n=32)
    loader = CombinedLoader({"a": make_loader(data, batch_size=8), "b": Batches(make_loader(data, batch_size=8))},
                            "min_size")
    trainer = quiet_trainer(default_root_dir=root, max_epochs=2, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}",
                                                       monitor=None, save_top_k=-1, every_n_train_steps=2)])
    trainer.fit(TwoLoaders(), loader, ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()


def test_a_mid_epoch_resume_with_a_combined_train_loader_warns_and_an_epoch_end_one_does_not(tmp_path):
    fit(str(tmp_path / "a"))  # 4 batches an epoch: step 2 is mid-epoch, step 4 the epoch's end
    with pytest.warns(UserWarning, match="keeps no position .*CombinedLoader.* read again from its start"):
        fit(str(tmp_path / "b"), ckpt_path=str(tmp_path / "a" / "ck" / "step=2.ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(str(tmp_path / "c"), ckpt_path=str(tmp_path / "a" / "ck" / "step=4.ckpt"))
    assert not [w for w in caught if "keeps no position" in str(w.message)]
