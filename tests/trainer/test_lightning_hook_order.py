"""Every hook call of a module and a callback, in order, is Lightning's: ``lightning_hook_order_script.py`` records
them through a fit with Lightning's defaults (the sanity check of 2 val batches first), a validate, a test, a predict,
and a second fit that accumulates over an uneven epoch with clipping. It runs under pytorch_lightning and, with only
the package renamed, under stoker; the lists must be equal call for call (the hook's name, and the batch index or
stage it was given).

Found this way: stoker ran no sanity check by default, and its module had ``on_sanity_check_start``/``_end``
(Lightning's are callback hooks only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.test_manual_port import run_both

SCRIPT = Path(__file__).with_name("lightning_hook_order_script.py")


@pytest.mark.compat
@pytest.mark.slow
def test_every_hook_is_called_in_lightnings_order(tmp_path: Path) -> None:
    lightning, stoker = run_both(SCRIPT, tmp_path)
    assert list(stoker) == list(lightning) == ["fit", "validate", "test", "predict", "fit, accumulating"]
    for run in lightning:
        assert stoker[run] == lightning[run], run
    names = [call[1] for call in lightning["fit"]]  # the checks check something: the default run's landmarks
    assert names.count("training_step") == 4 and names.count("validation_step") == 2 + 2 * 2
    assert names.index("on_sanity_check_start") < names.index("train_dataloader") < names.index("on_train_start")
    assert [call[1] for call in lightning["fit, accumulating"]].count("optimizer_step") == 2
