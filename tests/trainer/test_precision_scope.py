"""A Trainer's precision stays with its run: the module comes back without autocast, the next run uses its own."""

from __future__ import annotations

from typing import Any

import torch

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


class DtypeProbe(Callback):
    """Records the dtype of the first layer's output on every training and validation batch."""

    def __init__(self) -> None:
        self.seen: list[torch.dtype] = []
        self._handle: Any = None

    def setup(self, trainer: Trainer, module: Regressor, stage: str) -> None:
        self._handle = module.net[0].register_forward_hook(lambda mod, inp, out: self.seen.append(out.dtype))

    def teardown(self, trainer: Trainer, module: Regressor, stage: str) -> None:
        self._handle.remove()


def _trainer(precision: str, probe: DtypeProbe) -> Trainer:
    return Trainer(max_epochs=1, precision=precision, callbacks=[probe], logger=False, enable_checkpointing=False,
                   enable_progress_bar=False)


def test_a_second_fit_in_full_precision_does_not_inherit_bf16() -> None:
    module, loader = Regressor(), make_loader(make_regression_data(n=16), 8)
    first, second = DtypeProbe(), DtypeProbe()
    _trainer("bf16", first).fit(module, loader)
    assert first.seen and set(first.seen) == {torch.bfloat16}
    assert "forward" not in module.__dict__  # the autocast wrapper left with the run
    _trainer("fp32", second).fit(module, loader)
    assert second.seen and set(second.seen) == {torch.float32}


def test_validate_after_fit_runs_under_the_trainer_precision_again() -> None:
    module, loader = Regressor(), make_loader(make_regression_data(n=16), 8)
    probe = DtypeProbe()
    trainer = _trainer("bf16", probe)
    trainer.fit(module, loader)
    probe.seen.clear()
    outputs = []
    handle = module.register_forward_hook(lambda mod, inp, out: outputs.append(out.dtype))
    trainer.validate(module, loader)
    handle.remove()
    assert set(probe.seen) == {torch.bfloat16}
    # One autocast mechanism: the step runs under the precision's autocast, and the module's forward is not wrapped
    # (no cast of its outputs back to float32), as in Lightning.
    assert set(outputs) == {torch.bfloat16}
    assert "forward" not in module.__dict__


class AutocastSeen(Regressor):
    """Records, in each training_step, whether CPU autocast is on there (code outside the module's forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.autocast: list[tuple[bool, torch.dtype]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.autocast.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return super().training_step(batch, batch_idx)


def test_training_step_runs_under_autocast_in_mixed_precision_only() -> None:
    loader = make_loader(make_regression_data(n=16), 8)
    for precision, expected in (("bf16", True), ("fp32", False), ("bf16", True)):
        module = AutocastSeen()
        _trainer(precision, DtypeProbe()).fit(module, loader)
        assert len(module.autocast) == 2
        assert {on for on, _ in module.autocast} == {expected}, precision
        if expected:
            assert {dtype for _, dtype in module.autocast} == {torch.bfloat16}
