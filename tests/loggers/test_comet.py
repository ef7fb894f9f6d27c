"""CometLogger on an offline Comet experiment: what a fit logs is read back from the archive Comet writes (the file
``comet upload`` sends), and the checkpoints go under the offline folder, in the experiment key's folder."""

from __future__ import annotations

import json
import os
import pickle
import sys
import zipfile
from typing import Any

import pytest
import torch

from stoker import Trainer
from stoker.loggers import CometLogger
from tests.helpers.models import Regressor, make_loader, make_regression_data


# Nothing of a test leaves this machine: no error reports, no host, network or git details in the experiment.
QUIET = dict(log_env_details=False, log_env_host=False, log_env_network=False, log_git_metadata=False,
             log_git_patch=False, log_code=False)


@pytest.fixture(autouse=True)
def no_error_reports(monkeypatch: Any) -> None:
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")


def archive(folder: Any) -> tuple[list[dict], dict]:
    """The messages and the experiment record of the one offline archive in ``folder``."""
    (name,) = [n for n in os.listdir(folder) if n.endswith(".zip")]
    with zipfile.ZipFile(os.path.join(folder, name)) as zipped:
        messages = [json.loads(line) for line in zipped.read("messages.json").decode().splitlines()]
        return messages, json.loads(zipped.read("experiment.json"))


def payloads(messages: list[dict], kind: str, key: str) -> list[dict]:
    return [m["payload"][key] for m in messages if m["type"] == kind]


def test_a_fit_is_read_back_from_the_offline_archive(tmp_path: Any) -> None:
    offline = tmp_path / "comet"
    logger = CometLogger(project="regression", online=False, offline_directory=str(offline), name="first",
                         prefix="exp", **QUIET)
    train, val = (make_loader(make_regression_data(n=32, seed=s), batch_size=8) for s in (0, 1))
    trainer = Trainer(max_epochs=2, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
                      default_root_dir=tmp_path / "root")
    trainer.fit(Regressor(lr=0.05), train, val)
    logger.experiment.end()  # writes the archive (Comet's own step: finalize only flushes)
    messages, experiment = archive(offline)

    assert experiment["offline_id"] == logger.version and experiment["project_name"] == "regression"
    metrics = payloads(messages, "metric_msg", "metric")
    losses = [(m["step"], m["epoch"]) for m in metrics if m["metricName"] == "exp_train/loss"]
    assert losses == [(step, (step - 1) // 4) for step in range(1, 9)]  # one per optimizer step, at global_step
    assert [m["step"] for m in metrics if m["metricName"] == "exp_val/loss"] == [4, 8]
    params = {p["paramName"]: p["paramValue"] for p in payloads(messages, "parameter_msg", "param")}
    assert params["lr"] == 0.05 and params["momentum"] == 0.9
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert others["Created from"] == "stoker"
    # the run's checkpoints: {offline_directory}/{project}/{experiment key}/checkpoints, as Lightning places them
    folder = offline / "regression" / logger.version / "checkpoints"
    assert sorted(os.listdir(folder)) == ["epoch=1-step=8.ckpt"] and logger.save_dir == str(offline)


def test_construction_starts_nothing_and_checks_its_arguments(tmp_path: Any) -> None:
    logger = CometLogger(online=False, offline_directory=str(tmp_path), experiment_key="a" * 32)
    assert logger._experiment is None and logger.version == "a" * 32 and logger.name == "stoker_logs"
    assert pickle.loads(pickle.dumps(logger)).version == "a" * 32
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match="mode='get'.*experiment_key"):
        CometLogger(mode="get")
    with pytest.raises(ValueError, match="mode='latest'"):
        CometLogger(mode="latest")
    with pytest.raises(ValueError, match="32 to 50 letters and digits"):
        CometLogger(experiment_key="short")
    with pytest.raises(TypeError, match="online="):
        CometLogger(online="no")
    with pytest.raises(TypeError, match="unexpected keyword|got an unexpected"):
        CometLogger(no_such_setting=1)


def test_lightnings_earlier_names_are_taken(tmp_path: Any) -> None:
    logger = CometLogger(project_name="p", experiment_name="n", save_dir=tmp_path, offline=True)
    assert logger.name == "p" and logger.save_dir == os.fspath(tmp_path)
    with pytest.raises(TypeError, match="pass project= only"):
        CometLogger(project="p", project_name="q")
    with pytest.raises(TypeError, match="pass online= only"):
        CometLogger(online=False, offline=True)


def test_metrics_take_numbers_and_scalar_tensors(tmp_path: Any) -> None:
    logger = CometLogger(online=False, offline_directory=str(tmp_path), **QUIET)
    logger.log_metrics({"a": torch.tensor(2.0), "epoch": 3}, step=5)
    logger.log_hyperparams({"model": {"width": 8}})
    with pytest.raises(ValueError, match=r"tensor of shape \(2,\)"):
        logger.log_metrics({"v": torch.ones(2)})
    logger.finalize("success")
    logger.experiment.end()
    messages, _ = archive(tmp_path)
    assert [(m["metricName"], m["metricValue"], m["step"], m["epoch"])
            for m in payloads(messages, "metric_msg", "metric") if m["metricName"] == "a"] == [("a", 2.0, 5, 3)]
    names = {p["paramName"] for p in payloads(messages, "parameter_msg", "param")}
    assert any("width" in n for n in names)


def test_missing_comet_is_a_clear_error_at_construction(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "comet_ml", None)
    with pytest.raises(ModuleNotFoundError, match=r"CometLogger needs the 'comet_ml' package.*stoker\[comet\]"):
        CometLogger()


def test_accelerates_comet_ml_tracker_logs_numbers_text_and_config_and_ends_the_experiment(tmp_path: Any) -> None:
    from stoker import Accelerator
    from stoker.loggers import available_loggers

    offline = tmp_path / "comet"
    accelerator = Accelerator(cpu=True, log_with="comet_ml", project_dir=str(tmp_path / "out"))
    accelerator.init_trackers("proj", config={"lr": 0.1, "layers": 2},
                              init_kwargs={"comet_ml": {"online": False, "offline_directory": str(offline), **QUIET}})
    tracker = accelerator.get_tracker("comet_ml")
    assert isinstance(tracker, CometLogger) and tracker.name == "comet_ml" and tracker.run_name == "proj"
    assert accelerator.get_tracker("comet_ml", unwrap=True) is tracker.experiment is tracker.writer
    accelerator.log({"loss": 0.5, "note": "first", "val": {"acc": 0.75}}, step=3)
    accelerator.log({"loss": torch.tensor(0.25)})  # no step: one past the last
    accelerator.end_training()  # Accelerate's writer.end(): the offline archive is written now

    messages, experiment = archive(offline)
    assert experiment["project_name"] == "proj"
    metrics = [(m["metricName"], m["metricValue"], m["step"]) for m in payloads(messages, "metric_msg", "metric")]
    assert sorted(metrics) == [("acc", 0.75, 3), ("loss", 0.25, 4), ("loss", 0.5, 3)]
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert others["note"] == "first"
    params = {p["paramName"]: p["paramValue"] for p in payloads(messages, "parameter_msg", "param")}
    assert params["lr"] == 0.1 and params["layers"] == 2
    assert "comet_ml" not in available_loggers()  # "all" leaves Comet out: it needs an account or offline settings
    from stoker.tracking import CometMLTracker  # Accelerate's class, for a script that builds its tracker itself

    built = CometMLTracker("other", online=False, offline_directory=str(tmp_path / "c2"), **QUIET)
    assert isinstance(built, CometLogger) and (built.name, built.run_name) == ("comet_ml", "other")
    import comet_ml  # comet_ml.start's own settings object, as Accelerate's init_kwargs may pass it

    given = comet_ml.ExperimentConfig(name="given", tags=["a"])
    built = CometLogger(online=False, experiment_config=given, offline_directory=str(tmp_path / "c3"))
    assert built.save_dir == str(tmp_path / "c3") and given.offline_directory != str(tmp_path / "c3")  # a copy
    with pytest.raises(TypeError, match="no_such_setting=...\\) is not a comet_ml.ExperimentConfig setting"):
        CometLogger(online=False, experiment_config=given, no_such_setting=1)
