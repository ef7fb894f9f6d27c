"""The core Trainer (``stoker.trainer.Trainer``) and its Lightning face (``stoker.Trainer``): the core takes its own
arguments and ``RunOptions`` only, the face translates Lightning's names into them; the core satisfies the structural
type its loops are written against; the engine's agreement helpers average and agree as the strategy reduces."""

from __future__ import annotations

import inspect

import pytest
import torch

import stoker
from stoker.accelerator import agree_on_max, average_gradients
from stoker.trainer import RunOptions
from stoker.trainer import Trainer as CoreTrainer
from stoker.trainer.parts import TrainerParts


def _quiet(cls: type, tmp_path, **kwargs):  # noqa: ANN001, ANN202 - a test helper
    return cls(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, **kwargs)


def test_stoker_trainer_is_the_core_trainer_with_lightnings_names(tmp_path) -> None:
    assert issubclass(stoker.Trainer, CoreTrainer) and stoker.Trainer is not CoreTrainer
    assert len(inspect.signature(CoreTrainer.__init__).parameters) - 1 <= 26
    with pytest.raises(TypeError):
        _quiet(CoreTrainer, tmp_path, min_epochs=2)  # a Lightning name: only stoker.Trainer takes it
    trainer = _quiet(stoker.Trainer, tmp_path, min_epochs=2, accumulate_grad_batches=3, num_sanity_val_steps=-1)
    assert trainer.options == RunOptions(min_epochs=2, num_sanity_val_steps=None)
    assert trainer.accumulate == 3 and trainer.min_epochs == 2


def test_run_options_are_checked_where_they_enter(tmp_path) -> None:
    with pytest.raises(ValueError, match="min_steps"):
        RunOptions(min_steps=-3)
    with pytest.raises(TypeError, match="use_distributed_sampler"):
        RunOptions(use_distributed_sampler="no")
    with pytest.raises(TypeError, match="RunOptions"):
        _quiet(CoreTrainer, tmp_path, options={"min_epochs": 2})
    assert _quiet(CoreTrainer, tmp_path, options=RunOptions(min_epochs=3)).max_epochs_effective == 3


def test_the_core_trainer_has_every_member_its_loops_use(tmp_path) -> None:
    trainer = _quiet(CoreTrainer, tmp_path)
    members = set(TrainerParts.__annotations__) | {
        name for name, value in vars(TrainerParts).items() if not name.startswith("_") and callable(value)
        or isinstance(value, property)}
    missing = sorted(name for name in members if not hasattr(trainer, name))
    assert not missing, missing


class _TwoProcesses:
    """A strategy whose all_reduce combines this process's tensor with a fixed other process's."""

    def __init__(self, other: torch.Tensor) -> None:
        self.other = other

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        both = torch.stack([tensor, self.other])
        return {"mean": both.mean(0), "max": both.max(0).values, "sum": both.sum(0)}[op]


def test_average_gradients_is_one_reduction_of_all_of_them() -> None:
    grads = [torch.tensor([1.0, 3.0]), torch.tensor([[2.0], [4.0]])]
    average_gradients(_TwoProcesses(torch.tensor([3.0, 5.0, 6.0, 0.0])), grads)
    torch.testing.assert_close(grads[0], torch.tensor([2.0, 4.0]), rtol=0, atol=0)
    torch.testing.assert_close(grads[1], torch.tensor([[4.0], [2.0]]), rtol=0, atol=0)


def test_agree_on_max_takes_the_highest_signal() -> None:
    assert agree_on_max(_TwoProcesses(torch.tensor(15.0)), 10, "cpu", num_processes=2) == 15
    assert agree_on_max(_TwoProcesses(torch.tensor(0.0)), None, "cpu", num_processes=2) is None
    assert agree_on_max(_TwoProcesses(torch.tensor(15.0)), 10, "cpu", num_processes=1) == 10
