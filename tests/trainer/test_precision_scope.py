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
    assert set(outputs) == {torch.float32}  # the forward wrapper is back: outputs cast to float32
    assert "forward" not in module.__dict__
