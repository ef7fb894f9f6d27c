"""``Trainer.save_checkpoint(path, weights_only)`` in Lightning's form, the one call ModelCheckpoint makes per
folder, and the loggers' ``after_save_checkpoint`` hook."""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import pytest
import torch

from stoker import ModelCheckpoint
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import ListLogger
from tests.helpers.trainers import quiet_trainer


def loader() -> Any:
    return make_loader(make_regression_data(n=32), batch_size=8)


def test_weights_only_writes_a_module_that_loads_back_and_does_not_resume(tmp_path):
    module = Regressor(lr=0.05)
    trainer = quiet_trainer(max_steps=2)
    trainer.fit(module, loader())
    path = trainer.save_checkpoint(tmp_path / "w.ckpt", weights_only=True)
    assert path == str(tmp_path / "w.ckpt") and "hparams.json" in os.listdir(path)
    loaded = Regressor.load_from_checkpoint(path)
    assert loaded.hparams["lr"] == 0.05
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), module.state_dict().values()))
    with pytest.raises(ValueError):  # weights only: no Trainer state to resume from
        quiet_trainer(max_steps=3).fit(Regressor(lr=0.05), loader(), ckpt_path=path)
    with pytest.raises(TypeError, match="weights_only"):
        trainer.save_checkpoint(tmp_path / "x.ckpt", weights_only="yes")


@pytest.mark.parametrize("weights_only", [False, True])
def test_model_checkpoint_calls_save_checkpoint_once_per_folder(tmp_path, weights_only):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_weights_only=weights_only, save_top_k=-1)
    trainer = quiet_trainer(max_epochs=2, callbacks=[checkpoint], enable_checkpointing=True)
    with mock.patch.object(trainer, "save_checkpoint", wraps=trainer.save_checkpoint) as save:
        trainer.fit(Regressor(), loader())
    assert save.call_args_list == [mock.call(str(tmp_path / "epoch=0-step=4.ckpt"), weights_only),
                                   mock.call(str(tmp_path / "epoch=1-step=8.ckpt"), weights_only)]


def test_loggers_hear_of_each_save(tmp_path):
    class Recording(ListLogger):
        def __init__(self) -> None:
            super().__init__()
            self.saved: list[str] = []

        def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
            self.saved.append(os.path.basename(checkpoint_callback.best_model_path))

    logger = Recording()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    trainer = quiet_trainer(max_epochs=2, callbacks=[checkpoint], enable_checkpointing=True, logger=logger)
    trainer.fit(Regressor(), loader())
    assert logger.saved == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]


def test_a_save_after_fit_leaves_no_worker_thread_behind(tmp_path):
    import threading

    trainer = quiet_trainer(max_steps=2, default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), make_loader(make_regression_data(n=16)))
    trainer.save_checkpoint(tmp_path / "after.ckpt")  # many files fsynced at once, by a pool
    assert os.path.isdir(tmp_path / "after.ckpt")
    assert [t.name for t in threading.enumerate() if t.name.startswith("stoker-")] == []
