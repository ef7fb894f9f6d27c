"""`WandbLogger`: offline runs (``WANDB_MODE=offline``) read back from the run folder with W&B's own reader.

Each real run costs about a second (the W&B service starts), so the tests that start runs check several things each.
"""

from __future__ import annotations

import pickle
import sys

import pytest
import torch

from stoker.loggers import WandbLogger, build_loggers
from tests.helpers.trackers_readback import wandb_runs


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")


@pytest.mark.slow  # a W&B run starts the W&B service: a few seconds
def test_metrics_config_and_names_are_in_the_offline_run(tmp_path):
    logger = WandbLogger(name="trial", project="proj", save_dir=tmp_path, prefix="fit")
    assert logger.log_dir == str(tmp_path / "proj" / "version_0")
    logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd", "betas": [0.9, 0.99]}})
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=0)
    logger.log_metrics({"loss": 0.25, "acc": 1}, step=1)
    logger.log_metrics({"val": 2.0}, step=1)  # the same step: the same row
    run_id = logger.run_id
    logger.finalize("success")
    logger.finalize("success")  # twice is fine

    (run,) = wandb_runs(tmp_path)
    assert run.path.parent == tmp_path / "proj" / "version_0" / "wandb"
    assert (run.run_id, run.project, run.display_name, run.exit_code) == (run_id, "proj", "trial", 0)
    assert run.config == {"lr": 0.1, "opt/name": "sgd", "opt/betas": "[0.9, 0.99]"}
    assert run.history == [(0, {"fit-loss": 0.5}), (1, {"fit-loss": 0.25, "fit-acc": 1, "fit-val": 2.0})]


@pytest.mark.slow
def test_logging_after_finalize_resumes_the_same_run_and_failure_sets_the_exit_code(tmp_path):
    logger = WandbLogger(project="proj", save_dir=tmp_path)
    logger.log_metrics({"loss": 1.0}, step=3)
    logger.finalize("success")
    logger.log_metrics({"test/acc": 0.5})  # step=None: one past the largest step so far
    logger.finalize("failed")
    first, second = wandb_runs(tmp_path)
    assert first.run_id == second.run_id
    assert first.history == [(3, {"loss": 1.0})] and first.exit_code == 0
    assert second.history == [(4, {"test/acc": 0.5})] and second.exit_code == 1


@pytest.mark.slow
def test_string_version_is_folder_and_run_id_and_loggers_built_together_share_the_version(tmp_path):
    (tmp_path / "exp" / "version_0").mkdir(parents=True)
    wandb_logger, csv_logger = build_loggers(["wandb", "csv"], tmp_path, name="exp")
    assert isinstance(wandb_logger, WandbLogger) and wandb_logger.project == "exp"
    csv_logger.log_metrics({"a": 1.0}, step=0)
    csv_logger.finalize("success")
    wandb_logger.log_metrics({"a": 1.0}, step=0)
    wandb_logger.finalize("success")
    assert wandb_logger.log_dir == csv_logger.log_dir == str(tmp_path / "exp" / "version_1")

    named = WandbLogger(project="exp", save_dir=tmp_path, version="myrun01")
    named.log_metrics({"b": 2.0}, step=0)
    named.finalize("success")
    runs = {r.run_id: r for r in wandb_runs(tmp_path)}
    assert runs["myrun01"].path.parent.parent == tmp_path / "exp" / "myrun01"
    assert runs[wandb_logger.run_id].path.parent.parent == tmp_path / "exp" / "version_1"


def test_construction_starts_nothing_and_the_logger_pickles_without_its_run(tmp_path):
    logger = WandbLogger(project="p", save_dir=tmp_path, id="abc")
    assert logger._run is None and not (tmp_path / "p").exists()
    logger._run = object()  # stands for a live run: not picklable state
    copy = pickle.loads(pickle.dumps(logger))
    assert copy._run is None and copy.version == "abc" and copy.project == "p"


def test_unsupported_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"log_model='best'\) is not a choice"):  # True and 'all' upload
        WandbLogger(save_dir=tmp_path, log_model="best")
    with pytest.raises(TypeError, match="'resume'.*pass id="):
        WandbLogger(save_dir=tmp_path, resume="must")
    with pytest.raises(ValueError, match="disagree"):
        WandbLogger(save_dir=tmp_path, version="a", id="b")
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(ValueError, match=r"save_dir .*notes.txt' is a file"):
        WandbLogger(save_dir=tmp_path / "notes.txt")
    logger = WandbLogger(save_dir=tmp_path)
    logger._run = type("Run", (), {"log": lambda self, *a, **k: None})()
    with pytest.raises(ValueError, match=r"tensor of shape \(2,\)"):
        logger.log_metrics({"v": torch.ones(2)})


def test_missing_wandb_is_a_clear_error_at_construction(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what an environment without wandb looks like to imports
    with pytest.raises(ModuleNotFoundError, match=r"WandbLogger needs the 'wandb' package.*pip install 'stoker\[wandb\]'"):
        WandbLogger(save_dir=tmp_path)


def test_a_stand_in_wandb_module_counts_as_installed(tmp_path, monkeypatch):
    import types

    # A test's stand-in module (no import spec), as Lightning's W&B tests install one: the logger can be built.
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    assert WandbLogger(save_dir=tmp_path).project == "stoker_logs"
    monkeypatch.setitem(sys.modules, "wandb", None)  # Python's "cannot be imported"
    with pytest.raises(ModuleNotFoundError, match="WandbLogger needs the 'wandb' package"):
        WandbLogger(save_dir=tmp_path)


@pytest.mark.slow
def test_a_relative_save_dir_keeps_the_whole_run_there_after_the_working_directory_changed(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = WandbLogger(save_dir="runs", project="p")
    first.log_metrics({"x": 1.0}, step=0)  # starts W&B's service, in this working directory
    first.finalize("success")
    monkeypatch.chdir(tmp_path / "b")
    second = WandbLogger(save_dir="runs", project="p")
    second.log_metrics({"x": 2.0}, step=0)
    print("console output, which W&B's service copies into the run's files/output.log")
    second.finalize("success")
    (run,) = wandb_runs(tmp_path / "b" / "runs")
    assert run.history == [(0, {"x": 2.0})]
    # W&B's service resolved a relative dir against its own working directory (a): nothing of this run is there.
    assert list((tmp_path / "a").rglob(f"*{run.run_id}*")) == []
