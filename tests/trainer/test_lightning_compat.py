"""Done-when check of issue 14: a Lightning 2.x script using a DataModule and Lightning's Trainer names runs under
pytorch_lightning and, with only its imports renamed, under stoker with the same optimizer steps, validation runs
(and sanity-check runs) and checkpoint files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.test_manual_port import LIGHTNING, both, rename_imports, run

SCRIPT = Path(__file__).with_name("lightning_port_script.py")


@pytest.mark.compat
@pytest.mark.slow
def test_lightning_datamodule_script_same_steps_validations_and_checkpoints(tmp_path: Path) -> None:
    import pytorch_lightning  # noqa: F401 - in the test extra: missing, this fails (never a silent skip)
    ported = tmp_path / "port_stoker.py"
    ported.write_text(rename_imports(SCRIPT.read_text()))
    assert "pytorch_lightning" not in ported.read_text()
    (tmp_path / "pl").mkdir()
    (tmp_path / "st").mkdir()
    lightning, stoker = both(run, (SCRIPT, tmp_path / "pl", LIGHTNING), (ported, tmp_path / "st"))
    assert lightning["global_step"] == 3 * 4  # 8 batches per epoch, accumulate 2
    assert lightning["val_runs"] == 3 and lightning["sanity"] == 1
    assert stoker == lightning
