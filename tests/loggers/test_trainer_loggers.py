"""Loggers in real Trainer runs (issue 11, item 6): no value lost, one version per run, names as loggers.

The CSV is read back with the csv module and TensorBoard event files with tensorboard's EventAccumulator.
"""

from __future__ import annotations

import csv
import os

import pytest

from stoker import CSVLogger, TensorBoardLogger, Trainer
from tests.callbacks.modules import loaders
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import tensorboard_scalars


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _trainer(root, **kw) -> Trainer:
    kw.setdefault("enable_progress_bar", False)
    kw.setdefault("enable_checkpointing", False)
    kw.setdefault("seed", 0)
    return Trainer(default_root_dir=str(root), **kw)


def test_validate_after_fit_gets_its_own_csv_row_and_the_trained_epoch(tmp_path):
    logger = CSVLogger(tmp_path)
    t = _trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1)
    module = Regressor()
    train, val = loaders()
    t.fit(module, train, val)
    other_val = make_loader(make_regression_data(24, seed=5), 8)  # another set: another val/loss at the same step
    (result,) = t.validate(module, other_val)
    rows = _rows(logger.metrics_file_path)
    last_step = [r for r in rows if r["step"] == "8"]
    assert len(last_step) == 2, rows  # the fit's row is kept, the validation got its own
    fit_row, validate_row = last_step
    assert fit_row["train/loss"] != "" and fit_row["val/loss"] != "" and fit_row["epoch"] == "1"
    assert float(validate_row["val/loss"]) == pytest.approx(result["val/loss"])
    assert float(fit_row["val/loss"]) != pytest.approx(result["val/loss"])
    assert validate_row["epoch"] == "1"  # the weights are those of epoch 1 (the last one trained), not "2"
    assert validate_row["train/loss"] == ""


def test_loggers_of_one_run_share_one_version(tmp_path):
    (tmp_path / "stoker_logs" / "version_0").mkdir(parents=True)  # an earlier run
    tb, c = TensorBoardLogger(tmp_path), CSVLogger(tmp_path)
    t = _trainer(tmp_path, max_epochs=1, logger=[tb, c], log_every_n_steps=1)
    t.fit(Regressor(), *loaders())
    expected = str(tmp_path / "stoker_logs" / "version_1")
    assert tb.log_dir == c.log_dir == t.log_dir == expected
    assert [s for s, _ in tensorboard_scalars(expected)["train/loss"]] == [1, 2, 3, 4]
    assert [r["step"] for r in _rows(c.metrics_file_path)] == ["1", "2", "3", "4"]
    assert sorted(os.listdir(tmp_path / "stoker_logs")) == ["version_0", "version_1"]


def test_loggers_with_different_folders_share_the_first_number_free_in_all(tmp_path):
    (tmp_path / "csv" / "version_2").mkdir(parents=True)
    tb, c = TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")
    explicit = CSVLogger(tmp_path, name="mine", version=7)
    _trainer(tmp_path, logger=[tb, c, explicit])
    assert (tb.version, c.version, explicit.version) == (3, 3, 7)


@pytest.mark.parametrize("spec, kinds", [
    ("csv", [CSVLogger]),
    ("TensorBoard", [TensorBoardLogger]),
    (["tensorboard", "csv"], [TensorBoardLogger, CSVLogger]),
])
def test_logger_names_are_accepted_like_log_with(tmp_path, spec, kinds):
    t = _trainer(tmp_path, max_epochs=1, logger=spec, log_every_n_steps=2)
    assert [type(lg) for lg in t.loggers] == kinds
    t.fit(Regressor(), *loaders())
    expected = str(tmp_path / "stoker_logs" / "version_0")
    assert [lg.log_dir for lg in t.loggers] == [expected] * len(kinds)
    if CSVLogger in kinds:
        assert [r["step"] for r in _rows(os.path.join(expected, "metrics.csv"))] == ["2", "4"]
    if TensorBoardLogger in kinds:
        assert [s for s, _ in tensorboard_scalars(expected)["train/loss"]] == [2, 4]


def test_unknown_logger_name_lists_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"logger='wandbx' is not a supported logger. Expected one of: "
                                         r"'tensorboard', 'csv'"):
        _trainer(tmp_path, logger="wandbx")
    with pytest.raises(ValueError, match="'csv' twice"):
        _trainer(tmp_path, logger=["csv", "CSV"])
    with pytest.raises(TypeError, match="logger name such as 'csv'"):
        _trainer(tmp_path, logger=[CSVLogger])  # the class, not an instance


@pytest.mark.parametrize("cls", [CSVLogger, TensorBoardLogger])
def test_save_dir_that_is_a_file_fails_at_construction(tmp_path, cls):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    with pytest.raises(ValueError, match=r"save_dir .*notes.txt' is a file"):
        cls(a_file)
    with pytest.raises(ValueError, match=r"the path .*notes.txt' is a file"):
        cls(a_file / "below")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "stoker_logs").write_text("a file where the name folder goes")
    with pytest.raises(ValueError, match="is a file"):
        cls(tmp_path / "runs")
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize("cls", [CSVLogger, TensorBoardLogger])
@pytest.mark.parametrize("bad", [123, None, 1.5])
def test_save_dir_that_is_not_a_path_fails_at_construction(tmp_path, cls, bad):
    with pytest.raises(TypeError, match=rf"{cls.__name__}\(save_dir={bad!r}\): save_dir must be a folder path"):
        cls(bad)
