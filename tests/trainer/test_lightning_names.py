"""Lightning's everyday names after renaming only the package: ``pl.LightningModule``, ``TQDMProgressBar``,
``rank_zero_only``, the type aliases of ``utilities.types`` and ``strategies.DDPStrategy``.

The script test runs ``lightning_names_script.py`` under pytorch_lightning and, with ``pytorch_lightning`` renamed to
``stoker`` and nothing else, under stoker: same steps, epochs, learning rate and validation loss, bit-identical
weights.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.trainer.test_manual_port import run_both

SCRIPT = Path(__file__).with_name("lightning_names_script.py")


@pytest.mark.compat
@pytest.mark.slow
def test_a_script_with_lightnings_names_runs_after_renaming_only_the_package(tmp_path: Path) -> None:
    lightning, stoker = run_both(SCRIPT, tmp_path, "weights.pt")
    assert lightning == stoker == {"global_step": 24, "epoch": 3, "lr": 0.0125, "val_loss": stoker["val_loss"]}
    a, b = torch.load(tmp_path / "pl" / "weights.pt"), torch.load(tmp_path / "st" / "weights.pt")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


def test_lightning_class_names_are_stokers_classes() -> None:
    import stoker
    from stoker.trainer.datamodule import LightningDataModule

    assert stoker.LightningModule is stoker.TrainingModule
    assert stoker.LightningDataModule is stoker.DataModule is LightningDataModule
    assert {"LightningModule", "LightningDataModule", "TQDMProgressBar"} <= set(dir(stoker))


def test_rank_zero_only_reads_the_rank_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from stoker.utilities import rank_zero_info, rank_zero_only, rank_zero_warn

    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(key, raising=False)
    calls: list[int] = []
    record = rank_zero_only(lambda n: calls.append(n) or n)
    assert rank_zero_only.rank == 0 and record(1) == 1
    monkeypatch.setenv("RANK", "1")
    assert rank_zero_only.rank == 1 and record(2) is None
    assert rank_zero_only(lambda: "x", default="elsewhere")() == "elsewhere"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on rank 1
        rank_zero_warn("not on rank 1")
    rank_zero_info("not on rank 1 either")
    rank_zero_only.rank = 0  # fixed, as Lightning's Trainer does
    try:
        assert record(3) == 3
        with pytest.warns(UserWarning, match="on rank 0"):
            rank_zero_warn("on rank 0")
    finally:
        rank_zero_only.rank = None
    assert rank_zero_only.rank == 1 and calls == [1, 3]


def test_tqdm_progress_bar_takes_lightnings_arguments() -> None:
    from stoker.callbacks import ProgressBar, TQDMProgressBar

    bar = TQDMProgressBar(refresh_rate=20, process_position=1)
    assert isinstance(bar, ProgressBar) and bar.refresh_rate == 20 and bar.batches_per_refresh == 20
    assert bar.seconds == 0.5 and bar.process_position == 1  # the shown values still refresh on time
    assert bar.leave is False and ProgressBar().leave is True  # Lightning's default for leave
    off = TQDMProgressBar(refresh_rate=0)
    assert off.refresh_rate == 0 and not off._enabled
    for bad in (-1, 0.5, True, "2"):
        with pytest.raises(ValueError, match="number of batches"):
            TQDMProgressBar(refresh_rate=bad)


def test_strategies_ddp_takes_lightnings_common_arguments_and_refuses_its_plumbing() -> None:
    from stoker.strategies import DDPStrategy, FSDPStrategy

    strategy = DDPStrategy(process_group_backend="gloo", find_unused_parameters=True, timeout=30)
    assert strategy.backend == "gloo" and strategy.ddp_kwargs == {"find_unused_parameters": True}
    with pytest.raises(TypeError, match=r"parallel_devices=.*Trainer\(devices=\.\.\.\)"):
        DDPStrategy(parallel_devices=[torch.device("cpu")])
    with pytest.raises(TypeError, match="not both"):
        DDPStrategy(process_group_backend="gloo", backend="nccl")
    from stoker import FSDPStrategy as engine_fsdp

    assert FSDPStrategy is engine_fsdp
