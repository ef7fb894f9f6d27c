"""The Accelerator's trackers answer Accelerate's tracker surface: ``tracker.name`` is the kind (``"tensorboard"``),
``run_name`` the project, ``writer``/``run``/``logging_dir``/``log_images``/``log_table``, ``log_kwargs`` per tracker;
custom ``stoker.tracking.GeneralTracker`` subclasses in ``log_with``. Read back with each tool's own reader; a
Trainer's loggers keep Lightning's ``name``."""

from __future__ import annotations

import os

import numpy as np
import pytest

from stoker import Accelerator, CSVLogger, TensorBoardLogger, Trainer
from tests.helpers.trackers_readback import mlflow_runs, tensorboard_events, tensorboard_scalars, wandb_runs


def _images(n: int = 2) -> np.ndarray:
    """``n`` 4x6 RGB images, NHWC uint8, as a diffusers validation step makes them."""
    return np.arange(n * 4 * 6 * 3, dtype=np.uint8).reshape(n, 4, 6, 3)


def test_a_diffusers_validation_loop_finds_the_tensorboard_tracker_by_name(tmp_path):
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", "csv"], project_dir=str(tmp_path))
    accelerator.init_trackers("exp", config={"lr": 0.1})
    for epoch in range(2):
        accelerator.log({"train_loss": 0.5 - epoch / 10}, step=epoch)
        for tracker in accelerator.trackers:  # the pattern of diffusers' and transformers' example scripts
            if tracker.name == "tensorboard":
                tracker.writer.add_images("validation", _images(), epoch, dataformats="NHWC")
                tracker.writer.add_scalar("val/psnr", 20.0 + epoch, epoch)
            elif tracker.name == "wandb":
                raise AssertionError("no W&B tracker was asked for")
    tb, csv_logger = accelerator.trackers
    accelerator.end_training()

    assert [(t.name, t.run_name) for t in accelerator.trackers] == [("tensorboard", "exp"), ("csv", "exp")]
    assert tb.log_dir == tb.logging_dir == os.path.join(str(tmp_path), "exp", "version_0")  # the folder keeps run_name
    assert csv_logger.log_dir == tb.log_dir and tb.tracker is tb.writer is tb.experiment
    events = tensorboard_events(tb.log_dir)
    assert [(e.step, e.width, e.height) for e in events.Images("validation")] == [(0, 12, 4), (1, 12, 4)]
    assert tensorboard_scalars(tb.log_dir)["val/psnr"] == [(0, 20.0), (1, 21.0)]
    assert tensorboard_scalars(tb.log_dir)["train_loss"] == [(0, 0.5), (1, 0.4000000059604645)]


def test_accelerates_tracker_attributes_on_the_built_trackers(tmp_path):
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", "csv"], project_dir=str(tmp_path))
    accelerator.init_trackers("exp")
    tb, csv_logger = accelerator.trackers
    assert (tb.requires_logging_directory, csv_logger.requires_logging_directory) == (True, True)
    assert tb.main_process_only and csv_logger.main_process_only
    assert accelerator.get_tracker("tensorboard") is tb
    assert accelerator.get_tracker("tensorboard", unwrap=True) is tb.writer
    tb.store_init_configuration({"lr": 0.1})
    tb.finish()
    assert "lr: 0.1" in (tmp_path / "exp" / "version_0" / "hparams.yaml").read_text()


def test_a_trainers_loggers_keep_lightnings_name(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="exp")
    trainer = Trainer(logger=[logger, "csv"], default_root_dir=tmp_path, enable_progress_bar=False)
    assert [(lg.name, lg.run_name) for lg in trainer.loggers] == [("exp", "exp"), ("stoker_logs", "stoker_logs")]
    assert logger.log_dir == os.path.join(str(tmp_path), "exp", "version_0")
    # a logger the script builds and hands to log_with stays the script's: it keeps its name too
    csv_logger = CSVLogger(tmp_path, name="mine")
    accelerator = Accelerator(cpu=True, log_with=[csv_logger, "tensorboard"], project_dir=str(tmp_path))
    accelerator.init_trackers("exp")
    assert [t.name for t in accelerator.trackers] == ["mine", "tensorboard"]
    assert accelerator.get_tracker("csv") is csv_logger


def test_log_kwargs_text_and_scalar_groups_reach_tensorboard(tmp_path):
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("exp")
    accelerator.log({"loss": 0.5, "note": "hello", "lr": {"a": 1.0, "b": 2.0}}, step=3,
                    log_kwargs={"tensorboard": {"walltime": 1234.0}, "wandb": {"commit": False}})
    tracker = accelerator.get_tracker("tensorboard")
    tracker.log_images({"samples": _images(3)}, step=4, dataformats="NHWC")
    accelerator.end_training()

    events = tensorboard_events(tracker.log_dir)
    (loss,) = events.Scalars("loss")
    assert (loss.step, loss.value, loss.wall_time) == (3, 0.5, 1234.0)  # the kwargs reached add_scalar
    assert [e.step for e in events.Tensors("note/text_summary")] == [3]
    assert [(e.step, e.width) for e in events.Images("samples")] == [(4, 18)]
    groups = sorted(d for d in os.listdir(tracker.log_dir) if d.startswith("lr_"))
    assert groups == ["lr_a", "lr_b"]  # add_scalars writes one sub-run per member
    assert tensorboard_scalars(os.path.join(tracker.log_dir, "lr_b")) == {"lr": [(3, 2.0)]}


def test_text_in_accelerator_log_is_text_on_tensorboard_and_left_out_of_csv(tmp_path):
    # Accelerate's own tracking test logs {"total_loss": 0.1, "iteration": 1, "my_text": "some_value"}
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", "csv"], project_dir=str(tmp_path))
    accelerator.init_trackers("exp")
    with pytest.warns(UserWarning, match=r"CSVLogger logs numbers only; left out \['my_text'\]"):
        accelerator.log({"total_loss": 0.1, "iteration": 1, "my_text": "some_value"}, step=0)
    accelerator.end_training()
    tb, csv_logger = accelerator.trackers
    events = tensorboard_events(tb.log_dir)
    assert sorted(events.Tags()["scalars"]) == ["iteration", "total_loss"]
    assert events.Tags()["tensors"] == ["my_text/text_summary"]
    with open(csv_logger.metrics_file_path) as f:
        assert f.read().splitlines() == ["step,total_loss,iteration", "0,0.1,1"]


@pytest.mark.slow  # one offline W&B run (the W&B service starts) and the MLflow import: several seconds
def test_wandb_and_mlflow_trackers_answer_by_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri = "sqlite:///" + (tmp_path / "mlflow.db").as_posix()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    import wandb

    accelerator = Accelerator(cpu=True, log_with=["wandb", "mlflow"], project_dir=str(tmp_path))
    accelerator.init_trackers("exp", config={"lr": 0.1})
    for tracker in accelerator.trackers:
        if tracker.name == "wandb":
            assert tracker.run is tracker.experiment is tracker.tracker
            tracker.log({"validation": [wandb.Image(img) for img in _images()]}, step=0)
            tracker.log_images({"samples": list(_images(3))}, step=1)
            tracker.log_table("preds", columns=["id", "text"], data=[[0, "a"], [1, "b"]], step=2)
    with pytest.warns(UserWarning, match=r"MLFlowLogger logs numbers only; left out \['note'\]"):
        accelerator.log({"loss": 0.5, "note": "text"}, step=3, log_kwargs={"wandb": {"commit": True}, "mlflow": {}})
    assert [(t.name, t.run_name) for t in accelerator.trackers] == [("wandb", "exp"), ("mlflow", "version_0")]
    accelerator.end_training()

    (run,) = wandb_runs(tmp_path)
    seen = {step: {k.split(".")[0] for k in values} for step, values in run.history}
    assert seen == {0: {"validation"}, 1: {"samples"}, 2: {"preds"}, 3: {"loss", "note"}}
    assert [values["samples.count"] for step, values in run.history if step == 1] == [3]
    assert run.config == {"lr": 0.1} and run.exit_code == 0
    (ml_run,) = mlflow_runs(uri, "exp")
    assert ml_run.data.params == {"lr": "0.1"} and ml_run.data.metrics == {"loss": 0.5}
