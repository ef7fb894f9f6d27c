"""Loading a module the way a Lightning user expects: weights go through the module's own ``load_state_dict``, a
loose load says what it left out, and hyperparameters a checkpoint cannot keep are pointed out when ``fit`` starts."""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from stoker import Accelerator, Trainer, TrainingModule
from tests.helpers.models import (
    IN_FEATURES,
    OUT_FEATURES,
    Regressor,
    make_loader,
    make_regression_data,
)
from tests.helpers.weights import assert_same_weights


def fit_once(tmp_path: Any, module: TrainingModule) -> str:
    """One short fit; the path of the checkpoint ``save_checkpoint`` writes after it."""
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, make_loader(make_regression_data(n=16)))
    path = os.path.join(tmp_path, "saved.ckpt")
    trainer.save_checkpoint(path)
    return path


class Renamed(Regressor):
    """The same layers as ``Regressor`` under a new attribute name; its ``load_state_dict`` reads old checkpoints."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.body = self.net
        del self.net
        self.calls: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        self.calls.append(strict)
        renamed = {k.replace("net.", "body.", 1): v for k, v in state_dict.items()}
        return super().load_state_dict(renamed, strict=strict, assign=assign)


@pytest.mark.parametrize("strict", [None, True, False])
def test_weights_are_loaded_through_the_modules_own_load_state_dict(tmp_path: Any, strict: bool | None) -> None:
    trained = Regressor(seed=4)
    path = fit_once(tmp_path, trained)
    loaded = Renamed.load_from_checkpoint(path, strict=strict)
    assert loaded.calls == [strict is not False]  # once, with the strictness the call settled on
    assert_same_weights(loaded.body, trained.net)


def test_the_strict_loading_attribute_reaches_load_state_dict(tmp_path: Any) -> None:
    class Loose(Renamed):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.strict_loading = False

    path = fit_once(tmp_path, Regressor(seed=1))
    assert Loose.load_from_checkpoint(path).calls == [False]
    with pytest.raises(ValueError, match="strict=True"):
        Loose.load_from_checkpoint(path, strict=True)


def test_a_loose_load_names_the_keys_it_left_out(tmp_path: Any) -> None:
    trained = Regressor(seed=2)
    trained.head = nn.Linear(2, 2)  # saved, but the class does not build it
    path = fit_once(tmp_path, trained)

    class Wider(Regressor):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.tail = nn.Linear(2, 2)  # built, but not saved

    with pytest.warns(UserWarning) as record:
        loaded = Wider.load_from_checkpoint(path, strict=False)
    messages = [str(w.message) for w in record]
    assert any("no weights for" in m and "['tail.bias', 'tail.weight']" in m for m in messages), messages
    assert any("not loaded" in m and "['head.bias', 'head.weight']" in m for m in messages), messages
    assert_same_weights(loaded.net, trained.net)
    with pytest.raises(ValueError, match=r"missing keys \['tail.bias', 'tail.weight'\], unexpected keys "
                                         r"\['head.bias', 'head.weight'\]\. Pass strict=False"):
        Wider.load_from_checkpoint(path)


def test_a_strict_load_that_matches_warns_of_nothing(tmp_path: Any) -> None:
    path = fit_once(tmp_path, Regressor(seed=5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Regressor.load_from_checkpoint(path)
        Regressor.load_from_checkpoint(path, strict=False)


def test_weights_without_any_tensor_are_pointed_out(tmp_path: Any) -> None:
    class Empty(TrainingModule):  # nothing to save: its weights file holds no tensor
        pass

    Accelerator(cpu=True).save_model(Empty(), tmp_path / "weights")
    with pytest.warns(UserWarning, match="holds no weights"):
        Empty.load_from_checkpoint(tmp_path / "weights")


def test_tied_weights_still_load_strictly(tmp_path: Any) -> None:
    class Tied(Regressor):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.echo = nn.Linear(self.net[0].in_features, self.net[0].out_features)
            self.echo.weight = self.net[0].weight  # one tensor under two names: saved once

    trained = Tied(seed=7)
    path = fit_once(tmp_path, trained)
    loaded = Tied.load_from_checkpoint(path)
    assert loaded.echo.weight is loaded.net[0].weight
    assert_same_weights(loaded, trained)


class TakesAFunction(Regressor):
    def __init__(self, activation: Any = torch.tanh, ignore: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["activation"] if ignore else None)


def test_fit_names_a_hyperparameter_a_checkpoint_keeps_only_as_text(tmp_path: Any) -> None:
    with pytest.warns(UserWarning, match=r"'activation' of TakesAFunction \(builtin_function_or_method\) is not "
                                         r"plain data.*load_from_checkpoint\(path, activation=\.\.\.\)"):
        path = fit_once(tmp_path, TakesAFunction())
    with pytest.raises(ValueError, match="activation"):  # what the warning announced
        TakesAFunction.load_from_checkpoint(path)
    assert TakesAFunction.load_from_checkpoint(path, activation=torch.relu).hparams.activation is torch.relu


def test_hyperparameters_left_out_or_plain_are_not_warned_about(tmp_path: Any) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit_once(tmp_path / "a", TakesAFunction(ignore=True))
        fit_once(tmp_path / "b", Regressor(lr=0.01))
    assert not [w for w in record if "not plain data" in str(w.message)]


def test_a_sub_module_given_as_hyperparameter_is_left_to_save_hyperparameters_warning(tmp_path: Any) -> None:
    class WithEncoder(Regressor):
        def __init__(self, encoder: nn.Module) -> None:
            super().__init__()
            self.save_hyperparameters()

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit_once(tmp_path, WithEncoder(nn.Linear(2, 2)))
    about = [str(w.message) for w in record if "'encoder'" in str(w.message)]
    assert about and all(m.startswith("save_hyperparameters: the argument 'encoder' is an nn.Module") for m in about)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/last.ckpt", "s3://bucket/run/last.ckpt"])
def test_a_url_is_refused_with_what_to_do_instead(url: str) -> None:
    with pytest.raises(ValueError, match=r"a URL\. A stoker checkpoint is a folder.*copy the folder here first"):
        Regressor.load_from_checkpoint(url)


class FromNamespace(TrainingModule):
    """Takes its settings in one object, as many Lightning scripts do (``args`` of an ``ArgumentParser``)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.save_hyperparameters(config)
        self.passed_as = config
        self.net = nn.Linear(IN_FEATURES, OUT_FEATURES)
        self.lr = config.lr  # read as an attribute: the object must come back as what it was

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Settings(dict):
    """A dict whose items are read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@pytest.mark.parametrize("config", [argparse.Namespace(lr=0.02, width=3), {"lr": 0.02, "width": 3}],
                         ids=["namespace", "dict"])
@pytest.mark.parametrize("weights_only", [False, True])
def test_hyperparameters_given_in_one_argument_are_given_back_in_it(tmp_path: Any, config: Any,
                                                                    weights_only: bool) -> None:
    if isinstance(config, dict):
        config = Settings(config)
    trained = FromNamespace(config)
    assert dict(trained.hparams) == {"lr": 0.02, "width": 3}
    path = fit_once(tmp_path, trained)
    if weights_only:  # the export beside its hparams.json keeps the same record
        trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                          default_root_dir=tmp_path / "attach")
        trainer.fit(trained, make_loader(make_regression_data(n=8)))  # a Trainer attached, to save through it
        trainer.save_checkpoint(tmp_path / "weights", weights_only=True)
        path = tmp_path / "weights"
    loaded = FromNamespace.load_from_checkpoint(path, weights_only=weights_only)
    assert dict(loaded.hparams) == {"lr": 0.02, "width": 3}
    assert isinstance(loaded.hparams, type(trained.hparams))
    kind = argparse.Namespace if isinstance(config, argparse.Namespace) else dict
    assert loaded.passed_as is not None and isinstance(loaded.passed_as, kind)
    assert_same_weights(loaded, trained)


def test_a_data_module_that_takes_one_argument_is_rebuilt_with_it(tmp_path: Any) -> None:
    from stoker import DataModule

    class Data(DataModule):
        def __init__(self, hparams: argparse.Namespace) -> None:
            super().__init__()
            self.save_hyperparameters(hparams)
            self.size = hparams.size  # reads it as the Namespace it was

        def train_dataloader(self) -> Any:
            return make_loader(make_regression_data(n=self.size))

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Regressor(), datamodule=Data(argparse.Namespace(size=16)))
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    assert Data.load_from_checkpoint(tmp_path / "saved.ckpt").size == 16


def test_weights_only_is_taken_and_checked(tmp_path: Any) -> None:
    path = fit_once(tmp_path, Regressor(seed=2))
    Regressor.load_from_checkpoint(path, weights_only=None)
    with pytest.raises(TypeError, match=r"weights_only='yes'\): expected True, False or None"):
        Regressor.load_from_checkpoint(path, weights_only="yes")


def test_the_hyperparameters_key_names_where_the_checkpoint_hooks_find_them(tmp_path: Any) -> None:
    from stoker import DataModule

    seen: dict[str, Any] = {}

    class Noting(Regressor):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            seen.update(checkpoint)

    class Data(DataModule):
        def __init__(self, size: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self) -> Any:
            return make_loader(make_regression_data(n=self.hparams.size))

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Noting(lr=0.03), datamodule=Data())
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    assert seen[TrainingModule.CHECKPOINT_HYPER_PARAMS_KEY]["lr"] == 0.03
    assert seen[DataModule.CHECKPOINT_HYPER_PARAMS_KEY] == {"size": 8}


def test_layers_built_on_the_meta_device_take_the_saved_weights(tmp_path: Any) -> None:
    class Lazy(Regressor):
        def configure_model(self) -> None:
            if not hasattr(self, "head"):
                with torch.device("meta"):  # no memory until the weights arrive
                    self.head = nn.Linear(2, 2)

    trained = Regressor(seed=1)
    trained.head = nn.Linear(2, 2)
    path = fit_once(tmp_path, trained)
    loaded = Lazy.load_from_checkpoint(path)
    assert not any(p.is_meta for p in loaded.parameters())
    assert_same_weights(loaded, trained)
