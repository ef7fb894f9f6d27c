"""Which weights validate/test/predict use, and ``trainer.ckpt_path``: the checkpoint the stage loaded."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch

from stoker import ModelCheckpoint, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.weights import params_of


def _fitted(tmp_path: Any, **checkpoint: Any) -> tuple[Trainer, Regressor]:
    trainer = Trainer(default_root_dir=str(tmp_path), max_epochs=3, logger=False, enable_progress_bar=False,
                      enable_model_summary=False,
                      callbacks=[ModelCheckpoint(monitor="val/loss", mode="max", **checkpoint)])
    module = Regressor(val_scores=[3.0, 1.0, 2.0, 0.0, 0.0])  # epoch 0 is the best ("max"): not the last weights
    data = make_loader(make_regression_data(n=16), batch_size=8)
    trainer.fit(module, data, data)
    return trainer, module


def test_ckpt_path_is_the_folder_each_stage_loaded(tmp_path: Any) -> None:
    trainer, module = _fitted(tmp_path, save_top_k=-1)
    data = make_loader(make_regression_data(n=16), batch_size=8)
    assert trainer.ckpt_path is None  # the fit started fresh
    best = trainer.checkpoint_callback.best_model_path
    assert os.path.basename(best).startswith("epoch=0")
    trainer.test(module, data, ckpt_path="best")
    assert trainer.ckpt_path == best
    trainer.validate(module, data, ckpt_path="last")  # the newest complete checkpoint: epoch 2's
    assert os.path.basename(trainer.ckpt_path).startswith("epoch=2")
    trainer.validate(module, data)  # a module passed and no ckpt_path: its own weights, nothing loaded
    assert trainer.ckpt_path is None


def test_without_module_or_ckpt_path_the_best_checkpoint_is_evaluated_with_a_warning(tmp_path: Any) -> None:
    trainer, module = _fitted(tmp_path)
    data = make_loader(make_regression_data(n=16), batch_size=8)
    fitted = [p.clone() for p in params_of(module)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a module passed: its current weights, silently
        trainer.test(module, data)
    assert trainer.ckpt_path is None
    assert all(torch.equal(a, b) for a, b in zip(params_of(module), fitted))
    with pytest.warns(UserWarning, match="got no module and no ckpt_path: it evaluates the best checkpoint"):
        trainer.test(dataloaders=data)
    assert trainer.ckpt_path == trainer.checkpoint_callback.best_model_path
    assert not all(torch.equal(a, b) for a, b in zip(params_of(module), fitted))  # epoch 0's weights now


def test_that_warning_carries_lightnings_sentence_for_warning_filters(tmp_path: Any) -> None:
    trainer, _ = _fitted(tmp_path)
    data = make_loader(make_regression_data(n=16), batch_size=8)
    for run in (trainer.validate, trainer.test):  # in the first line, where the filters Lightning users write look
        with pytest.warns(UserWarning, match=r"^[^\n]*The best model of the previous `fit` call will be used"):
            run(dataloaders=data)


def test_best_needs_a_checkpoint_that_keeps_one(tmp_path: Any) -> None:
    trainer, module = _fitted(tmp_path, save_top_k=0)
    with pytest.raises(ValueError, match=r"not configured to save the best checkpoint \(save_top_k=0\)"):
        trainer.test(module, make_loader(make_regression_data(n=16)), ckpt_path="best")
