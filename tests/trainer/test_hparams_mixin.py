"""HyperparametersMixin: what save_hyperparameters collects (subclasses, composition, dataclasses), hparams_initial,
and what the loggers get."""

from __future__ import annotations

import dataclasses
import pickle
import warnings

import pytest
import torch

from stoker import DataModule, TrainingModule
from stoker.core.mixins import HyperparametersMixin
from stoker.trainer.hparams import hparams_for_loggers
from stoker.utilities import AttributeDict, is_picklable


class Base(HyperparametersMixin):
    def __init__(self, width: int, depth: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()


class Wider(Base):
    def __init__(self, width: int, dropout: float = 0.1) -> None:
        super().__init__(width * 2)  # the subclass's own value of `width` is the one saved


class Owner:  # not a hyperparameter holder: its arguments are not the child's
    def __init__(self, secret: str = "x") -> None:
        self.child = Base(width=3)


class Holder(HyperparametersMixin):  # a holder building one in its __init__: its arguments join (Lightning's rule)
    def __init__(self, batch: int = 8) -> None:
        super().__init__()
        self.inner = Owner()
        self.child = Base(width=4)


@pytest.mark.parametrize("base", [HyperparametersMixin, TrainingModule, DataModule])
def test_a_plain_class_a_module_and_a_datamodule_save_their_init_arguments(base: type) -> None:
    class Thing(base):
        def __init__(self, lr: float = 0.1, name: str = "a") -> None:
            super().__init__()
            self.save_hyperparameters(ignore="name")

    assert Thing(lr=0.5).hparams == {"lr": 0.5}


def test_the_init_chain_of_one_object_is_collected_and_nothing_of_an_owner_object() -> None:
    assert Wider(width=5).hparams == {"width": 5, "depth": 2, "dropout": 0.1}
    assert Owner().child.hparams == {"width": 3, "depth": 2}
    holder = Holder()
    assert holder.child.hparams == {"width": 4, "depth": 2, "batch": 8} and holder.inner.child.hparams["width"] == 3
    assert "batch" not in holder.inner.child.hparams  # the plain Owner in between ends the chain


def test_a_second_call_adds_and_removes_what_it_ignores() -> None:
    class Tuned(Base):
        def __init__(self, width: int, depth: int, lr: float) -> None:
            super().__init__(width, depth)
            self.save_hyperparameters(ignore=["depth"])

    assert Tuned(4, 3, 0.01).hparams == {"width": 4, "lr": 0.01}


def test_a_dataclass_saves_the_fields_its_init_takes() -> None:
    @dataclasses.dataclass(eq=False)
    class Config(TrainingModule):
        width: int
        name: str = "net"
        skip: bool = False
        built: int = dataclasses.field(default=7, init=False)

        def __post_init__(self) -> None:
            super().__init__()
            self.save_hyperparameters(ignore="skip")

    assert Config(3, name="wide").hparams == {"width": 3, "name": "wide"}


def test_hparams_initial_keeps_what_was_saved_and_the_loggers_get_it() -> None:
    module = Base(width=8)
    module.hparams.width = 16  # a change at run time: hparams shows it, the loggers and hparams_initial do not
    assert module.hparams.width == 16 and module.hparams_initial == {"width": 8, "depth": 2}
    module.hparams_initial["width"] = 0  # a copy
    assert hparams_for_loggers(module) == {"width": 8, "depth": 2}
    assert Owner().child.hparams_initial is not Owner().child.hparams_initial
    assert HyperparametersMixin().hparams_initial == {}


def test_a_submodule_argument_warns_unless_ignored() -> None:
    class Net(TrainingModule):
        def __init__(self, encoder: torch.nn.Module, ignore: bool) -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["encoder"] if ignore else None)

    with pytest.warns(UserWarning, match=r"'encoder' is an nn.Module.*ignore=\['encoder'\]"):
        Net(torch.nn.Linear(2, 2), ignore=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Net(torch.nn.Linear(2, 2), ignore=True).hparams == {"ignore": True}


@pytest.mark.parametrize("error", [TypeError, ValueError])
def test_a_value_that_is_no_container_of_hyperparameters_is_refused(error: type) -> None:
    class Odd(HyperparametersMixin):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.save_hyperparameters(value)

    with pytest.raises(error, match="save_hyperparameters"):
        Odd(3.5)


def test_attribute_dict_pickles_and_is_picklable_tells_what_does() -> None:
    saved = AttributeDict(lr=0.1, name="a")
    assert pickle.loads(pickle.dumps(saved)) == saved and pickle.loads(pickle.dumps(saved)).lr == 0.1
    assert is_picklable(saved) and not is_picklable(lambda x: x)
