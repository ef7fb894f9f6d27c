"""ModelCheckpoint's rules across validations and runs: several validations per epoch each save, ranking by recency
(no ``monitor``) keeps ``best_k_models`` empty, a fresh run beside an earlier one keeps the earlier ``last``, the
kept set as YAML, and the module path and constructor annotations a renamed Lightning script and a CLI read."""

from __future__ import annotations

import importlib
import inspect
import os
import typing

import pytest
import yaml

from stoker import ModelCheckpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _names(path) -> list[str]:
    return sorted(os.listdir(path))


def test_several_validations_per_epoch_each_save_by_default(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "c", save_top_k=-1)  # save_on_train_epoch_end not given
    trainer(tmp_path, max_epochs=2, val_check_interval=0.5, callbacks=[ckpt]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "c") == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt",
                                      "epoch=1-step=8.ckpt"]
    once = ModelCheckpoint(dirpath=tmp_path / "once", save_top_k=-1)  # one validation per epoch: its end
    trainer(tmp_path / "o", max_epochs=2, callbacks=[once]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "once") == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]


def test_without_monitor_the_newest_is_best_and_no_score_is_listed(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, save_last=True)
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(), *loaders())
    assert _names(tmp_path) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    assert ckpt.best_model_path == str(tmp_path / "epoch=1-step=8.ckpt")
    assert (ckpt.best_k_models, ckpt.kth_best_model_path, ckpt.best_model_score) == ({}, "", None)
    newest = ModelCheckpoint(dirpath=tmp_path / "one", filename="model")  # save_top_k=1: one folder, replaced
    trainer(tmp_path / "r", max_epochs=3, callbacks=[newest]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "one") == ["model.ckpt"] and checkpoint_step(newest.best_model_path) == 12


def test_a_fresh_run_keeps_the_earlier_runs_last_and_names_its_own_v1(tmp_path):
    def fit(**kw):
        ckpt = ModelCheckpoint(dirpath=tmp_path / "c", save_top_k=0, save_last=True, **kw)
        trainer(tmp_path, max_epochs=1, callbacks=[ckpt]).fit(Regressor(), loaders()[0])
        return ckpt

    fit()
    with pytest.warns(UserWarning, match="earlier run"):
        second = fit()
    assert _names(tmp_path / "c") == ["last-v1.ckpt", "last.ckpt"]
    assert second.last_model_path == str(tmp_path / "c" / "last-v1.ckpt")
    with pytest.warns(UserWarning, match="earlier run"):
        fit(enable_version_counter=False)  # no counter: the folder of that name is replaced
    assert _names(tmp_path / "c") == ["last-v1.ckpt", "last.ckpt"]


def test_to_yaml_writes_the_kept_scores(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val/score", save_top_k=2)
    trainer(tmp_path, max_epochs=3, callbacks=[ckpt]).fit(Regressor(val_scores=[3.0, 1.0, 2.0]), *loaders())
    ckpt.to_yaml()
    with open(tmp_path / "best_k_models.yaml") as file:
        assert yaml.safe_load(file) == {str(tmp_path / "epoch=1-step=8.ckpt"): 1.0,
                                         str(tmp_path / "epoch=2-step=12.ckpt"): 2.0}
    ckpt.to_yaml(tmp_path / "elsewhere.yaml")
    assert (tmp_path / "elsewhere.yaml").read_text() == (tmp_path / "best_k_models.yaml").read_text()


def test_lightning_module_path_and_annotations_a_cli_can_read():
    from stoker.callbacks import checkpoint

    assert importlib.import_module("stoker.callbacks.model_checkpoint") is checkpoint  # the same module
    # Evaluated types, not strings, so that a CLI (jsonargparse) can parse "--save_last link".
    annotation = inspect.signature(ModelCheckpoint).parameters["save_last"].annotation
    assert typing.get_args(annotation) == (bool, typing.Literal["link"], type(None))
    assert inspect.signature(ModelCheckpoint).parameters["monitor"].annotation == (str | None)
