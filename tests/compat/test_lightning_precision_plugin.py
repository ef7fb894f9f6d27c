"""``trainer.precision_plugin`` (Lightning's name): the run's precision in Lightning's spelling, and its device."""

from __future__ import annotations

import pytest
import torch

from stoker import Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


@pytest.mark.parametrize("given, lightning", [(None, "32-true"), ("32", "32-true"), ("16-mixed", "16-mixed"),
                                              ("bf16", "bf16-mixed"), ("bf16-true", "bf16-true"),
                                              ("64-true", "64-true")])
def test_the_precision_in_lightnings_spelling(given: str | None, lightning: str) -> None:
    trainer = Trainer(accelerator="cpu", logger=False, **({} if given is None else {"precision": given}))
    assert trainer.precision_plugin.precision == lightning and trainer.precision_plugin.device == "cpu"


def test_a_step_reads_it_as_lightnings_amp_tests_do() -> None:
    seen: list[tuple[str, torch.dtype]] = []

    class Reads(Regressor):
        def training_step(self, batch, batch_idx):
            plugin = self.trainer.precision_plugin
            seen.append((plugin.precision, self.net(batch[0]).dtype))
            return super().training_step(batch, batch_idx)

    Trainer(accelerator="cpu", precision="bf16-mixed", max_steps=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False).fit(Reads(), make_loader(make_regression_data(n=8), batch_size=8))
    assert seen == [("bf16-mixed", torch.bfloat16)]
