"""`MLFlowLogger`: runs in a local file store (fast) and in the default SQLite store, read back with ``MlflowClient``."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch

from stoker.loggers import MLFlowLogger, build_loggers
from tests.helpers.trackers_readback import mlflow_client, mlflow_history, mlflow_runs


@pytest.fixture
def file_store(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A file-store tracking URI (MLflow opens file stores only when told it may)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def test_metrics_params_status_and_version_name_read_back(file_store, tmp_path):
    logger = MLFlowLogger("exp", tracking_uri=file_store, tags={"team": "a"}, prefix="fit")
    assert logger.version == 0 and logger._client is not None  # the version asked the store
    logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd"}, "long": "x" * 7000})
    logger.log_metrics({"loss": torch.tensor(0.5), "bad{key}": 1}, step=0)
    logger.log_metrics({"loss": 0.25}, step=1)
    logger.finalize("success")
    logger.finalize("success")

    (run,) = mlflow_runs(file_store, "exp")
    assert run.info.run_id == logger.run_id and run.info.status == "FINISHED"
    assert run.info.run_name == "version_0"
    assert run.data.tags["stoker.version"] == "0" and run.data.tags["team"] == "a"
    assert run.data.params == {"lr": "0.1", "opt/name": "sgd", "long": "x" * 6000}
    assert mlflow_history(file_store, run.info.run_id, "fit-loss") == [(0, 0.5), (1, 0.25)]
    assert mlflow_history(file_store, run.info.run_id, "fit-bad_key_") == [(0, 1.0)]

    # A second run of the experiment takes the next version; a failure is recorded as such.
    second = MLFlowLogger("exp", tracking_uri=file_store)
    second.log_metrics({"loss": 1.0})
    second.finalize("failed")
    runs = mlflow_runs(file_store, "exp")
    assert [(r.info.run_name, r.info.status) for r in runs] == [("version_0", "FINISHED"), ("version_1", "FAILED")]


def test_logging_after_finalize_reopens_the_run_and_run_id_resumes_it(file_store):
    logger = MLFlowLogger("exp", tracking_uri=file_store, run_name="custom")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    client = mlflow_client(file_store)
    assert client.get_run(logger.run_id).info.status == "FINISHED"  # reading run_id does not reopen
    logger.log_metrics({"test/acc": 0.5})  # step=None: one past the largest step so far
    assert client.get_run(logger.run_id).info.status == "RUNNING"
    logger.finalize("interrupted")
    assert client.get_run(logger.run_id).info.status == "KILLED"

    resumed = MLFlowLogger("exp", tracking_uri=file_store, run_id=logger.run_id)
    resumed.log_metrics({"loss": 0.5}, step=1)
    resumed.finalize("success")
    (run,) = mlflow_runs(file_store, "exp")
    assert run.info.run_name == "custom" and run.info.status == "FINISHED"
    assert mlflow_history(file_store, run.info.run_id, "loss") == [(0, 1.0), (1, 0.5)]
    assert mlflow_history(file_store, run.info.run_id, "test/acc") == [(1, 0.5)]


def test_built_together_with_csv_the_version_is_free_in_both(file_store, tmp_path, monkeypatch):
    MLFlowLogger("exp", tracking_uri=file_store, version=4).log_metrics({"a": 1.0})  # the store holds version 4
    (tmp_path / "exp" / "version_2").mkdir(parents=True)  # the folders hold version 2
    monkeypatch.setenv("MLFLOW_TRACKING_URI", file_store)
    csv_logger, mlflow_logger = build_loggers(["csv", "mlflow"], tmp_path, name="exp")
    csv_logger.log_metrics({"a": 1.0}, step=0)
    csv_logger.finalize("success")
    mlflow_logger.log_metrics({"a": 1.0}, step=0)
    mlflow_logger.finalize("success")
    assert csv_logger.log_dir == str(tmp_path / "exp" / "version_5")
    assert [r.info.run_name for r in mlflow_runs(file_store, "exp")] == ["version_4", "version_5"]


@pytest.mark.slow  # MLflow creates the SQLite schema through its migrations: ~10 s on a busy core
def test_default_store_is_sqlite_under_save_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    logger = MLFlowLogger("exp", save_dir=tmp_path / "store")
    uri = "sqlite:///" + (tmp_path / "store" / "mlflow.db").as_posix()
    assert logger.tracking_uri == uri and logger.log_dir == str(tmp_path / "store")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 0.5}, step=2)
    logger.experiment.log_text(logger.run_id, "hello", "note.txt")
    logger.finalize("success")
    (run,) = mlflow_runs(uri, "exp")
    assert run.data.params == {"lr": "0.1"} and run.info.status == "FINISHED"
    assert mlflow_history(uri, run.info.run_id, "loss") == [(2, 0.5)]
    assert (tmp_path / "store" / "artifacts" / run.info.run_id / "artifacts" / "note.txt").read_text() == "hello"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_with_a_tracking_uri_the_run_folder_is_under_default_root_dir_not_the_working_directory(file_store, tmp_path,
                                                                                                  monkeypatch):
    from tests.helpers.models import Regressor, make_loader, make_regression_data
    from tests.helpers.trainers import quiet_trainer

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # save_dir's default "./mlruns" has no effect with a tracking URI
    logger = MLFlowLogger("exp", tracking_uri=file_store)
    assert logger.save_dir is None and logger.log_dir is None
    trainer = quiet_trainer(max_epochs=1, logger=logger, enable_checkpointing=True, default_root_dir=tmp_path / "root")
    trainer.fit(Regressor(), make_loader(make_regression_data(n=16)))
    assert trainer.checkpoint_callback.best_model_path == str(tmp_path / "root" / "exp" / "version_0" / "checkpoints"
                                                              / "epoch=0-step=2.ckpt")
    assert list((tmp_path / "cwd").iterdir()) == []
    assert MLFlowLogger("exp", save_dir=tmp_path / "store").save_dir == str(tmp_path / "store")  # the default store


def test_construction_touches_nothing_and_the_logger_pickles_without_its_client(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    logger = MLFlowLogger("exp", save_dir=tmp_path / "store")
    assert not (tmp_path / "store").exists() and logger._client is None
    logger._client = object()  # stands for a live client (a database engine)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy._client is None and copy.tracking_uri == logger.tracking_uri


def test_unsupported_arguments_and_missing_mlflow_are_clear_errors(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match=r"log_model='best'\) is not a choice"):  # True and 'all' upload
        MLFlowLogger(save_dir=tmp_path, log_model="best")
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ModuleNotFoundError,
                       match=r"MLFlowLogger needs the 'mlflow' package.*pip install 'stoker\[mlflow\]'"):
        MLFlowLogger(save_dir=tmp_path)
