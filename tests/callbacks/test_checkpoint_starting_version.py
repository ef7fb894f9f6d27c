"""``ModelCheckpoint.STARTING_VERSION``: where the ``-v{n}`` suffixes of a name already taken start (Lightning's class
attribute, changed by a subclass or on an instance)."""

from __future__ import annotations

import os

from stoker import ModelCheckpoint
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _names_after_three_epochs(tmp_path, ckpt: ModelCheckpoint) -> set[str]:
    trainer(tmp_path, max_epochs=3, callbacks=[ckpt]).fit(Regressor(), *loaders())
    return set(os.listdir(ckpt.dirpath))


def test_version_suffixes_start_at_one_by_default(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="fixed", monitor="epoch", mode="max", save_top_k=-1)
    assert ModelCheckpoint.STARTING_VERSION == 1
    assert _names_after_three_epochs(tmp_path, ckpt) == {"fixed.ckpt", "fixed-v1.ckpt", "fixed-v2.ckpt"}


def test_a_subclass_or_an_instance_moves_the_first_suffix(tmp_path):
    class FromNine(ModelCheckpoint):
        STARTING_VERSION = 9

    ckpt = FromNine(dirpath=tmp_path / "sub", filename="fixed", monitor="epoch", mode="max", save_top_k=-1)
    assert _names_after_three_epochs(tmp_path, ckpt) == {"fixed.ckpt", "fixed-v9.ckpt", "fixed-v10.ckpt"}
    assert {os.path.basename(p) for p in ckpt.best_k_models} == {"fixed.ckpt", "fixed-v9.ckpt", "fixed-v10.ckpt"}

    ckpt = ModelCheckpoint(dirpath=tmp_path / "inst", filename="fixed", monitor="epoch", mode="max", save_top_k=-1)
    ckpt.STARTING_VERSION = 0
    assert _names_after_three_epochs(tmp_path, ckpt) == {"fixed.ckpt", "fixed-v0.ckpt", "fixed-v1.ckpt"}
