"""The CSV logger's ``experiment`` (its `ExperimentWriter`), when held rows reach the file, and Lightning's options
(``flush_logs_every_n_steps``, ``prefix``, ``log_hyperparams()`` with nothing, the ``csv_logs`` module path)."""

from __future__ import annotations

import csv
import os
import pickle
import warnings

import pytest
import torch
import yaml

from stoker.loggers import CSVLogger
from stoker.loggers.csv_writer import ExperimentWriter


def _lines(path: str) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def test_the_experiment_is_the_runs_writer_and_lightnings_module_path_reaches_it(tmp_path):
    logger = CSVLogger(tmp_path, name="exp", version=3)
    assert not (tmp_path / "exp").exists()  # nothing until the writer is asked for
    writer = logger.experiment
    assert isinstance(writer, ExperimentWriter) and logger.experiment is writer
    assert writer.log_dir == logger.log_dir and os.path.isdir(logger.log_dir)
    assert writer.metrics_file_path == os.path.join(logger.log_dir, ExperimentWriter.NAME_METRICS_FILE)
    assert (ExperimentWriter.NAME_METRICS_FILE, ExperimentWriter.NAME_HPARAMS_FILE) == ("metrics.csv", "hparams.yaml")
    import stoker.loggers.csv as csv_module
    import stoker.loggers.csv_logs as lightning_path

    assert lightning_path is csv_module and lightning_path.ExperimentWriter is ExperimentWriter


def test_held_rows_are_the_writers_metrics_until_saved(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=3)
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=0)
    logger.log_metrics({"loss": 0.25}, step=1)
    assert logger.experiment.metrics == [{"step": 0, "loss": 0.5}, {"step": 1, "loss": 0.25}]
    assert not os.path.exists(logger.metrics_file_path)
    logger.log_metrics({"loss": 0.125}, step=2)  # (2 + 1) % 3 == 0: saved, nothing held any more
    assert logger.experiment.metrics == []
    assert _lines(logger.metrics_file_path) == ["step,loss", "0,0.5", "1,0.25", "2,0.125"]


def test_steps_that_never_meet_the_rule_are_saved_once_that_many_rows_are_held(tmp_path):
    logger = CSVLogger(tmp_path, flush_every_n_steps=4)
    for step in (10, 20, 30):  # 11, 21, 31: no multiple of 4
        logger.log_metrics({"a": float(step)}, step=step)
    assert not os.path.exists(logger.metrics_file_path)
    logger.log_metrics({"a": 40.0}, step=40)  # 41 is no multiple either, but four rows are held now
    assert [line.split(",")[0] for line in _lines(logger.metrics_file_path)] == ["step", "10", "20", "30", "40"]


def test_a_saved_row_still_takes_values_of_its_step_and_a_new_metric_widens_the_file(tmp_path):
    logger = CSVLogger(tmp_path, flush_every_n_steps=1)  # every call saves
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.log_metrics({"val/loss": 2.0}, step=0)  # same step, nothing replaced: the saved row grows
    logger.log_metrics({"train/loss": 0.5}, step=1)
    with open(logger.metrics_file_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"step": "0", "train/loss": "1.0", "val/loss": "2.0"},
                    {"step": "1", "train/loss": "0.5", "val/loss": ""}]


def test_the_flush_setting_under_both_names_and_its_checks(tmp_path):
    assert CSVLogger(tmp_path, flush_logs_every_n_steps=7).flush_every_n_steps == 7
    assert CSVLogger(tmp_path, flush_every_n_steps=7, flush_logs_every_n_steps=7).flush_every_n_steps == 7
    with pytest.raises(ValueError, match="flush_every_n_steps=5 and flush_logs_every_n_steps=7"):
        CSVLogger(tmp_path, flush_every_n_steps=5, flush_logs_every_n_steps=7)
    with pytest.raises(TypeError, match="flush_every_n_steps=True"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=True)
    with pytest.raises(ValueError, match="flush_every_n_steps=-1"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=-1)


def test_prefix_goes_before_every_metric_name(tmp_path):
    logger = CSVLogger(tmp_path, prefix="fold1")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    assert _lines(logger.metrics_file_path)[0] == "step,fold1-loss"
    with pytest.raises(TypeError, match="prefix=3"):
        CSVLogger(tmp_path, prefix=3)


@pytest.mark.parametrize("name", [None, ""])
def test_log_hyperparams_with_nothing_writes_an_empty_hparams_file(tmp_path, name):
    logger = CSVLogger(tmp_path, name=name)
    logger.log_hyperparams()
    assert logger.root_dir == str(tmp_path)
    with open(tmp_path / "version_0" / "hparams.yaml") as f:
        assert yaml.safe_load(f) == {}
    logger.log_hyperparams({"lr": 0.1})
    logger.log_hyperparams(None)  # keeps what was logged
    with open(tmp_path / "version_0" / "hparams.yaml") as f:
        assert yaml.safe_load(f) == {"lr": 0.1}


def test_a_reused_version_warns_that_rows_are_appended_but_a_resumed_run_does_not(tmp_path):
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("success")
    again = CSVLogger(tmp_path, version=0)
    with pytest.warns(UserWarning, match="exists already .* appended"):
        again.log_metrics({"a": 2.0}, step=1)
    again.finalize("success")
    assert _lines(first.metrics_file_path) == ["step,a", "0,1.0", "1,2.0"]

    resumed = CSVLogger(tmp_path, version=0)
    resumed.continue_run(0, step=0)  # what fit(ckpt_path=...) does: the row of step 1 is trained again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.log_metrics({"a": 3.0}, step=1)
        resumed.finalize("success")
    assert _lines(first.metrics_file_path) == ["step,a", "0,1.0", "1,3.0"]


def test_a_url_is_refused_instead_of_becoming_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="'memory://runs'.*local folder"):
        CSVLogger("memory://runs")
    assert os.listdir(tmp_path) == []


def test_a_logger_with_held_rows_and_its_writer_pickle(tmp_path):
    logger = CSVLogger(tmp_path, version=0)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    logger.log_metrics({"a": 2.0}, step=1)
    copy = pickle.loads(pickle.dumps(logger))
    assert (copy.save_dir, copy.name, copy.version) == (logger.save_dir, logger.name, 0)
    assert copy.experiment.metrics == [{"step": 1, "a": 2.0}]
    copy.finalize("success")
    assert _lines(logger.metrics_file_path) == ["step,a", "0,1.0", "1,2.0"]
