"""An ordinary Lightning script's reads of the Trainer and the module after ``fit`` give the same answers on stoker
(``lightning_surface_script.py``: the metrics dicts, ``early_stopping_callback``/``checkpoint_callbacks``, ranks,
batch counts, ``lr_schedulers()`` as the user's own scheduler, test/validate/predict, ``load_from_checkpoint``, and a
ReduceLROnPlateau stepped by hand as Lightning's manual-optimization docs show). It runs under pytorch_lightning and,
with only ``pytorch_lightning`` renamed to ``stoker``, under stoker; every value it prints must be equal.

Found this way and fixed: ``self.global_rank``/``local_rank`` and ``trainer.global_rank``/``local_rank``/``node_rank``/
``num_devices``/``world_size`` were missing, as were ``trainer.early_stopping_callback(s)`` and
``checkpoint_callbacks``; ``lr_schedulers()`` returned the Trainer's wrapper, so the documented
``isinstance(sch, ReduceLROnPlateau)`` test was False and the scheduler silently never stepped; ``logged_metrics``
held the loggers' "epoch" label; ``LearningRateMonitor`` values were not callback metrics; a callback's
``on_train_batch_end`` got the loss tensor itself where Lightning passes ``{"loss": loss}``, so the common
``outputs["loss"]`` failed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.test_manual_port import run_both

SCRIPT = Path(__file__).with_name("lightning_surface_script.py")


@pytest.mark.compat
@pytest.mark.slow
def test_a_lightning_scripts_reads_of_trainer_and_module_agree(tmp_path: Path) -> None:
    lightning, stoker = run_both(SCRIPT, tmp_path)
    assert not [k for k, v in lightning.items() if isinstance(v, str) and v.startswith("ERROR")], lightning
    assert stoker == lightning
    assert lightning["manual plateau lr"] < 0.05 and lightning["global_step"] == 24  # the checks check something
