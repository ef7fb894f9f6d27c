"""One check per argument: the same bad value is refused with the same exception type and message shape from every
entry point (Trainer, Accelerator constructor and setter, the launcher's flag, config file and environment)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import stoker.utils
from stoker import Accelerator, Trainer, set_seed
from stoker.accelerator import InvalidArgumentError, check_accumulation_steps, check_seed
from stoker.accelerator.arguments import InvalidArgumentType, InvalidArgumentValue
from stoker.cli import main
from stoker.cli.launch import add_parser, resolve
from stoker.compat.lightning.seed import seed_everything
from stoker.utils import GradientAccumulationPlugin

BAD_STEPS = [0, -2, 2.0, "2", True]


@pytest.fixture(autouse=True)
def _no_launcher_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STOKER_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"):
        monkeypatch.delenv(name, raising=False)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["launch", *argv])


def _set_steps(value: Any) -> None:
    Accelerator(cpu=True).gradient_accumulation_steps = value


# entry point -> (how to pass a value, how the message names the argument, the example of a correct call)
ACCUMULATION_ENTRIES: dict[str, tuple[Callable[[Any], Any], str, str]] = {
    "Trainer(accumulate)": (lambda v: Trainer(accumulate=v), "Trainer(accumulate={})", "Trainer(accumulate=4)"),
    "Trainer(accumulate_grad_batches)": (lambda v: Trainer(accumulate_grad_batches=v),
                                         "Trainer(accumulate_grad_batches={})",
                                         "Trainer(accumulate_grad_batches=4)"),
    "Accelerator(...)": (lambda v: Accelerator(cpu=True, gradient_accumulation_steps=v),
                         "Accelerator(gradient_accumulation_steps={})", "Accelerator(gradient_accumulation_steps=4)"),
    "setter": (_set_steps, "accelerator.gradient_accumulation_steps = {}",
               "accelerator.gradient_accumulation_steps = 4"),
    "GradientAccumulationPlugin": (lambda v: GradientAccumulationPlugin(num_steps=v),
                                   "GradientAccumulationPlugin(num_steps={})",
                                   "GradientAccumulationPlugin(num_steps=4)"),
    "stoker launch": (lambda v: resolve(_parse("--gradient_accumulation_steps", str(v), "t.py"), gpu_count=0),
                      "stoker launch --gradient_accumulation_steps {}", "stoker launch --gradient_accumulation_steps 4"),
}


def _refusal(call: Callable[[], Any]) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as info:
        call()
    assert isinstance(info.value, (InvalidArgumentType, InvalidArgumentValue))
    return info.value


# The launcher's flag is parsed by argparse as an int: it gets the int values (the config-file test sends the rest).
CASES = [(entry, bad) for entry in ACCUMULATION_ENTRIES for bad in BAD_STEPS
         if entry != "stoker launch" or type(bad) is int]


@pytest.mark.parametrize("entry, bad", CASES)
def test_accumulation_steps_are_refused_alike_everywhere(entry: str, bad: Any) -> None:
    set_value, named, example = ACCUMULATION_ENTRIES[entry]
    error = _refusal(lambda: set_value(bad))
    message = str(error)
    shown = str(bad) if entry == "stoker launch" else repr(bad)
    got = repr(bad) if type(bad) is int else f"a {type(bad).__name__}"
    assert message.startswith(f"{named.format(shown)} must be an int >= 1: got {got}, expected an integer >= 1 ")
    assert "1 means no accumulation" in message and f"Pass e.g. {example} " in message
    # a bad type is a TypeError, a bad value a ValueError (each entry point raised one or the other before)
    impossible = type(bad) in (int, float) and (bad < 1 or bad != int(bad))  # no count at all: a bad value
    assert isinstance(error, ValueError) if impossible else isinstance(error, TypeError)


@pytest.mark.parametrize("text, got", [("0", "0"), ("-2", "-2"), ("2.0", "a float"), ("true", "a bool"),
                                       ("four", "a str")])
def test_a_config_files_accumulation_steps_get_the_same_check(tmp_path: Path, text: str, got: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"gradient_accumulation_steps: {text}\n")
    error = _refusal(lambda: resolve(_parse("--config_file", str(config), "t.py"), gpu_count=0))
    assert f"must be an int >= 1: got {got}, expected an integer >= 1" in str(error)
    config.write_text("gradient_accumulation_steps: '3'\n")  # a number written as text is still a number
    assert resolve(_parse("--config_file", str(config), "t.py"), gpu_count=0)["gradient_accumulation_steps"] == 3


def test_the_launchers_variable_gets_the_same_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOKER_GRADIENT_ACCUMULATION_STEPS", "0")
    error = _refusal(lambda: Accelerator(cpu=True))
    assert str(error).startswith("STOKER_GRADIENT_ACCUMULATION_STEPS=0 must be an int >= 1: got 0")
    monkeypatch.setenv("STOKER_GRADIENT_ACCUMULATION_STEPS", "four")
    assert "'four' is not a number of micro-batches" in str(_refusal(lambda: Accelerator(cpu=True)))


def test_stoker_launch_reports_the_refusal_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--gradient_accumulation_steps", "0", "t.py"]) == 2
    err = capsys.readouterr().err
    assert "error: stoker launch --gradient_accumulation_steps 0 must be an int >= 1" in err


def test_good_accumulation_steps_pass_through_every_entry_point() -> None:
    assert check_accumulation_steps(3) == 3
    assert Trainer(accumulate=3, logger=False).accelerator.gradient_accumulation_steps == 3
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    accelerator.gradient_accumulation_steps = 5
    assert accelerator.gradient_accumulation_steps == 5
    assert resolve(_parse("--gradient_accumulation_steps", "3", "t.py"), gpu_count=0)["gradient_accumulation_steps"] == 3


SEED_ENTRIES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "Trainer(seed)": (lambda v: Trainer(seed=v), "Trainer(seed={}) must be None or an int"),
    "set_seed": (set_seed, "set_seed(seed={}) needs an int"),
    "stoker.utils.set_seed": (stoker.utils.set_seed, "set_seed(seed={}) needs an int"),
    "seed_everything": (seed_everything, "seed_everything(seed={}) must be None or an int"),
}


@pytest.mark.parametrize("entry", list(SEED_ENTRIES))
@pytest.mark.parametrize("bad", ["1", 1.5, True])
def test_seeds_are_refused_alike_everywhere(entry: str, bad: Any) -> None:
    call, named = SEED_ENTRIES[entry]
    message = str(_refusal(lambda: call(bad)))
    assert message.startswith(f"{named.format(repr(bad))}: got a {type(bad).__name__}, expected an integer such as 42")
    assert re.search(r"Pass e\.g\. \w+(\.\w+)?\((seed=)?42\)\.$", message)


def test_check_seed_accepts_ints_and_none_only_where_allowed() -> None:
    assert check_seed(7) == 7 and check_seed(None, allow_none=True) is None
    with pytest.raises(InvalidArgumentError, match=r"set_seed\(seed=None\) needs an int"):
        check_seed(None)


@pytest.mark.parametrize("bad", ["l2", 2, "max"])
def test_clip_algorithms_are_refused_alike_by_the_trainer_and_clip_gradients(bad: Any) -> None:
    from tests.helpers.models import Regressor

    with pytest.raises(ValueError) as by_trainer:
        Trainer(gradient_clip_val=1.0, gradient_clip_algorithm=bad)
    module = Regressor()
    with pytest.raises(ValueError) as by_module:
        module.clip_gradients(module.configure_optimizers(), gradient_clip_val=1.0, gradient_clip_algorithm=bad)
    tail = f"gradient_clip_algorithm={bad!r}) must be 'norm' (the default: clip the gradients' total norm) or 'value'"
    assert str(by_trainer.value).startswith("Trainer(" + tail)
    assert str(by_module.value).startswith("clip_gradients(" + tail)
    assert type(by_trainer.value) is type(by_module.value) is ValueError


def test_the_launchers_precision_variable_gets_the_precision_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STOKER_MIXED_PRECISION", raising=False)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp17")
    with pytest.raises(ValueError) as by_variable:
        Accelerator(cpu=True)
    with pytest.raises(ValueError) as by_argument:
        Accelerator(cpu=True, mixed_precision="fp17")
    assert str(by_variable.value).startswith("ACCELERATE_MIXED_PRECISION='fp17' is not a precision. Expected one of")
    assert str(by_argument.value).startswith("Accelerator(mixed_precision='fp17') is not a precision. Expected one of")
    assert str(by_variable.value).split(" is not")[1] == str(by_argument.value).split(" is not")[1]
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", " BF16-Mixed ")
    assert Accelerator(cpu=True).mixed_precision == "bf16"
