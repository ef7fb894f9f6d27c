"""A checkpoint that does not fit the model or optimizer is refused before anything changes, naming the checkpoint,
the key and both shapes (before: torch's bare "size mismatch", or weights loaded and then the optimizer failing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from stoker import Accelerator, Trainer
from stoker.accelerator.checkpointing.preflight import StateMismatchError
from tests.helpers.models import Regressor, make_loader, make_regression_data


def _saved(tmp_path: Path, model: nn.Module) -> str:
    acc = Accelerator(cpu=True)
    model, opt = acc.prepare(model, torch.optim.Adam(model.parameters(), lr=0.1))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return acc.save_state(str(tmp_path / "ckpt"))


def _fresh(model: nn.Module) -> tuple[Accelerator, nn.Module, list[torch.Tensor]]:
    acc = Accelerator(cpu=True)
    model, _ = acc.prepare(model, torch.optim.Adam(model.parameters(), lr=0.1))
    return acc, model, [p.detach().clone() for p in model.parameters()]


def test_a_changed_shape_names_checkpoint_key_and_shapes_and_changes_nothing(tmp_path: Path) -> None:
    path = _saved(tmp_path, nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)))
    acc, model, before = _fresh(nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2)))
    with pytest.raises(StateMismatchError, match=rf"{path}: model\.safetensors does not fit Sequential: .*'0\.weight' "
                                                 r"saved \[4, 3\], the model's \[5, 3\]; .*Nothing was loaded"):
        acc.load_state(path)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_strict_false_with_a_layer_added_fails_before_any_weight_is_loaded(tmp_path: Path) -> None:
    path = _saved(tmp_path, nn.Sequential(nn.Linear(3, 2)))
    acc, model, before = _fresh(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2)))
    with pytest.raises(StateMismatchError, match=r"optimizer #0 was saved with parameter groups of \[2\] parameters; "
                                                 r"this optimizer has \[4\]\. A layer was added or removed"):
        acc.load_state(path, strict=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the first layer too


def test_trainer_fit_says_which_checkpoint_it_could_not_resume(tmp_path: Path) -> None:
    loader = make_loader(make_regression_data(n=32), 8)
    trainer = Trainer(max_epochs=1, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False)
    trainer.fit(Regressor(), loader)
    ckpt = trainer.checkpoint_callback.last_model_path if hasattr(trainer.checkpoint_callback, "last_model_path") \
        else None
    ckpt = ckpt or str(next(p for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()))

    class Wider(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.net[0] = nn.Linear(8, 17)
            self.net[2] = nn.Linear(17, 2)

    with pytest.raises(ValueError, match=r"Cannot resume from .*does not fit .*saved \[16, 8\], the model's \[17, 8\]"):
        Trainer(max_epochs=2, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False).fit(
            Wider(), loader, ckpt_path=ckpt)
