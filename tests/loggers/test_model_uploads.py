"""``log_model``: the W&B and MLflow loggers upload `ModelCheckpoint`'s checkpoints, by Lightning's rule.

MLflow runs in a local file store and is read back with ``MlflowClient`` (the files downloaded and compared byte for
byte, the best one loaded again); W&B runs offline and is read back from its transaction log with W&B's own reader
(the artifact records ``wandb sync`` uploads, with the staged copies of the files).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
import torch
import yaml

from stoker import Callback
from stoker.callbacks import ModelCheckpoint
from stoker.loggers import MLFlowLogger, WandbLogger
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import mlflow_client, wandb_runs
from tests.helpers.trainers import quiet_trainer


def fit(logger, checkpoint: ModelCheckpoint, epochs: int = 3, callbacks: tuple = ()) -> Regressor:
    data = make_regression_data(n=32)
    module = Regressor(val_scores=[0.5, 0.25, 0.75, 0.125][:epochs])
    trainer = quiet_trainer(max_epochs=epochs, logger=logger, callbacks=[checkpoint, *callbacks],
                            enable_checkpointing=True)
    trainer.fit(module, make_loader(data), make_loader(data))
    return module


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def file_store(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def mlflow_artifacts(uri: str, run_id: str, path: str | None = None) -> list[str]:
    client = mlflow_client(uri)
    found = []
    for entry in client.list_artifacts(run_id, path):
        found += mlflow_artifacts(uri, run_id, entry.path) if entry.is_dir else [entry.path]
    return sorted(found)


def test_mlflow_log_model_true_uploads_the_kept_checkpoints_when_the_run_ends(file_store, tmp_path):
    logger = MLFlowLogger("exp", tracking_uri=file_store, save_dir=tmp_path, log_model=True)
    seen_before_end: list[list[str]] = []

    class BeforeEnd(Callback):  # the loggers' finalize comes after on_train_end
        def on_train_end(self, trainer, module) -> None:
            seen_before_end.append(mlflow_artifacts(file_store, logger.run_id))

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/score", save_top_k=2, save_last=True)
    module = fit(logger, checkpoint, callbacks=(BeforeEnd(),))
    assert seen_before_end == [[]]

    kept = sorted(os.listdir(tmp_path / "ckpt"))
    assert kept == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]  # scores 0.5, 0.25 kept (min)
    uploaded = mlflow_artifacts(file_store, logger.run_id)
    client = mlflow_client(file_store)
    for name in kept:
        stem = name[:-len(".ckpt")]
        assert f"{stem}/metadata.yaml" in uploaded and f"{stem}/aliases.txt" in uploaded
        local = Path(client.download_artifacts(logger.run_id, f"{stem}/{name}", str(tmp_path / "down")))
        assert files_of(local) == files_of(tmp_path / "ckpt" / name)  # every file, byte for byte
    meta = yaml.safe_load(Path(client.download_artifacts(logger.run_id, "epoch=1-step=8/metadata.yaml",
                                                         str(tmp_path / "meta"))).read_text())
    assert meta == {"score": 0.25, "original_filename": "epoch=1-step=8.ckpt",
                    "Checkpoint": {"monitor": "val/score", "mode": "min", "save_last": True, "save_top_k": 2,
                                   "save_weights_only": False, "_every_n_train_steps": 0}}
    aliases = {name: Path(client.download_artifacts(logger.run_id, f"{name[:-5]}/aliases.txt",
                                                    str(tmp_path / name))).read_text() for name in kept}
    assert aliases == {"epoch=0-step=4.ckpt": "['latest']", "epoch=1-step=8.ckpt": "['latest', 'best']",
                       "last.ckpt": "['latest']"}
    # What went up is a checkpoint stoker loads: the best one's weights come back.
    best = Path(client.download_artifacts(logger.run_id, "epoch=1-step=8/epoch=1-step=8.ckpt", str(tmp_path / "b")))
    loaded = Regressor.load_from_checkpoint(best)
    expected = Regressor.load_from_checkpoint(tmp_path / "ckpt" / "epoch=1-step=8.ckpt")
    for a, b in zip(loaded.state_dict().values(), expected.state_dict().values()):
        assert torch.equal(a, b)
    assert not torch.equal(next(iter(loaded.state_dict().values())), next(iter(module.state_dict().values())))


def test_mlflow_log_model_all_uploads_each_checkpoint_as_it_is_saved(file_store, tmp_path):
    logger = MLFlowLogger("exp", tracking_uri=file_store, save_dir=tmp_path, log_model="all")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/score", save_top_k=1)
    fit(logger, checkpoint)
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["epoch=1-step=8.ckpt"]  # the others were evicted...
    uploaded = {path.split("/")[0] for path in mlflow_artifacts(file_store, logger.run_id)}
    assert uploaded == {"epoch=0-step=4", "epoch=1-step=8"}  # ...after they went up (epoch 2 was not kept)


def wandb_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # W&B's staged copies, kept until sync
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


@pytest.mark.slow  # a W&B run starts the W&B service
def test_wandb_log_model_all_records_each_checkpoint_as_a_model_artifact(tmp_path, monkeypatch):
    wandb_env(monkeypatch, tmp_path)
    logger = WandbLogger(save_dir=tmp_path / "logs", project="proj", log_model="all")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/score", save_top_k=1)
    fit(logger, checkpoint, epochs=2)

    (run,) = wandb_runs(tmp_path / "logs")
    assert [a["metadata"]["original_filename"] for a in run.artifacts] == ["epoch=0-step=4.ckpt",
                                                                            "epoch=1-step=8.ckpt"]
    settings = {"monitor": "val/score", "mode": "min", "save_last": None, "save_top_k": 1,
                "save_weights_only": False, "_every_n_train_steps": 0}
    for artifact, score in zip(run.artifacts, (0.5, 0.25)):
        assert (artifact["name"], artifact["type"]) == (f"model-{run.run_id}", "model")
        assert artifact["aliases"] == ["best", "latest"]
        assert artifact["metadata"] == {"score": score, "original_filename": artifact["metadata"]["original_filename"],
                                        "ModelCheckpoint": settings}
        for path, (size, digest, staged) in artifact["files"].items():  # what sync uploads is what was saved
            data = Path(staged).read_bytes()
            assert path.startswith("model.ckpt/") and len(data) == size and md5_b64(data) == digest
    last = files_of(tmp_path / "ckpt" / "epoch=1-step=8.ckpt")
    assert {path[len("model.ckpt/"):]: (size, digest) for path, (size, digest, _) in run.artifacts[1]["files"].items()} \
        == {name: (len(data), md5_b64(data)) for name, data in last.items()}


@pytest.mark.slow
def test_wandb_log_model_true_records_the_best_once_at_the_end_under_checkpoint_name(tmp_path, monkeypatch):
    wandb_env(monkeypatch, tmp_path)
    logger = WandbLogger(save_dir=tmp_path / "logs", project="proj", log_model=True, checkpoint_name="my-model")
    fit(logger, ModelCheckpoint(dirpath=tmp_path / "ckpt"), epochs=2)  # no monitor: the newest is kept
    (run,) = wandb_runs(tmp_path / "logs")
    assert [(a["name"], a["aliases"], a["metadata"]["original_filename"], a["metadata"]["score"])
            for a in run.artifacts] == [("my-model", ["best", "latest"], "epoch=1-step=8.ckpt", None)]


@pytest.mark.parametrize("logger_class", [WandbLogger, MLFlowLogger])
def test_a_log_model_that_is_not_a_choice_is_refused(logger_class, tmp_path):
    with pytest.raises(ValueError, match=r"log_model='best'\) is not a choice. Expected False .* True .* 'all'"):
        logger_class(save_dir=tmp_path, log_model="best")
    with pytest.raises(TypeError, match=r"log_model=1\) has type int; expected True, False or 'all'"):
        logger_class(save_dir=tmp_path, log_model=1)
    assert logger_class(save_dir=tmp_path).uploads_checkpoints is False
    assert logger_class(save_dir=tmp_path, log_model="all").uploads_checkpoints is True


class StandInRun:
    """A W&B run that records the calls the logger makes (for what needs the W&B server, or a failed run)."""

    def __init__(self, calls: list) -> None:
        self.calls, self.id = calls, "run1"

    def log_artifact(self, artifact, aliases=None):
        self.calls.append(("log_artifact", artifact.name, artifact.files, aliases))

    def use_artifact(self, name, type=None):
        self.calls.append(("run.use_artifact", name, type))
        return StandInArtifact(self.calls)


class StandInArtifact:
    def __init__(self, calls: list, name: str = "", type: str = "", metadata=None) -> None:
        self.calls, self.name, self.files = calls, name, []

    def add_dir(self, path, name=None):
        self.files.append((os.path.basename(path), name))

    def download(self, root=None):
        self.calls.append(("download", root))
        return root or "artifacts/model-run1:v0"


def stand_in_wandb(monkeypatch: pytest.MonkeyPatch, calls: list, run) -> None:
    import sys
    import types

    module = types.ModuleType("wandb")
    module.run = run
    module.Artifact = lambda **kwargs: StandInArtifact(calls, **kwargs)
    module.Api = lambda: types.SimpleNamespace(artifact=lambda name, type=None: (
        calls.append(("api.artifact", name, type)), StandInArtifact(calls))[1])
    monkeypatch.setitem(sys.modules, "wandb", module)


def test_wandb_log_model_true_uploads_at_the_end_of_a_successful_run_only(tmp_path, monkeypatch):
    calls: list = []
    stand_in_wandb(monkeypatch, calls, None)
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    (tmp_path / "epoch=0-step=4.ckpt").mkdir()
    checkpoint.best_model_path = str(tmp_path / "epoch=0-step=4.ckpt")
    logger = WandbLogger(save_dir=tmp_path / "logs", log_model=True, experiment=StandInRun(calls))
    logger.after_save_checkpoint(checkpoint)
    assert calls == []  # True: at the end
    logger.finalize("failed")  # Lightning uploads on success only
    assert calls == []
    logger.finalize("success")
    assert calls == [("log_artifact", "model-run1", [("epoch=0-step=4.ckpt", "model.ckpt")], ["latest", "best"])]


def test_wandb_download_artifact_and_use_artifact_go_through_the_run_or_the_public_api(tmp_path, monkeypatch):
    calls: list = []
    stand_in_wandb(monkeypatch, calls, None)
    assert WandbLogger.download_artifact("e/p/model-run1:best", tmp_path, artifact_type="model") == str(tmp_path)
    assert calls == [("api.artifact", "e/p/model-run1:best", "model"), ("download", str(tmp_path))]
    calls.clear()
    import wandb

    wandb.run = StandInRun(calls)  # an active run: the artifact is recorded as its input
    WandbLogger.download_artifact("e/p/model-run1:v0")
    WandbLogger.download_artifact("e/p/model-run1:v0", use_artifact=False, artifact_type="model")
    assert calls == [("run.use_artifact", "e/p/model-run1:v0", None), ("download", None),
                     ("api.artifact", "e/p/model-run1:v0", "model"), ("download", None)]
    calls.clear()
    logger = WandbLogger(save_dir=tmp_path / "logs", experiment=StandInRun(calls))
    logger.use_artifact("model-run1:best", "model").download(tmp_path)
    assert calls == [("run.use_artifact", "model-run1:best", "model"), ("download", tmp_path)]


def test_the_upload_rule_when_and_what_again(tmp_path):
    from types import SimpleNamespace

    from stoker.loggers.model_uploads import ModelUploads

    def folder(name: str) -> str:
        path = tmp_path / name
        path.mkdir(exist_ok=True)
        (path / "model.safetensors").write_bytes(b"x")
        return str(path)

    callback = SimpleNamespace(save_top_k=-1, last_model_path=folder("last.ckpt"), current_score=0.5,
                               best_model_path=folder("a.ckpt"), best_model_score=0.25,
                               best_k_models={str(tmp_path / "a.ckpt"): 0.25, str(tmp_path / "gone.ckpt"): 0.75})
    os.utime(callback.last_model_path, ns=(10**18, 10**18))  # saved first
    os.utime(callback.best_model_path, ns=(10**18 + 1, 10**18 + 1))
    at_once = ModelUploads(True, "L")  # True with save_top_k=-1: as each is saved
    first = at_once.after_save(callback)
    assert [(os.path.basename(u.path), u.aliases, u.score) for u in first] == [
        ("last.ckpt", ["latest"], 0.5), ("a.ckpt", ["latest", "best"], 0.25)]  # oldest first; gone.ckpt left out
    assert at_once.after_save(callback) == []  # nothing new
    os.utime(callback.last_model_path, ns=(10**18 + 2, 10**18 + 2))  # a new folder under the same name
    assert [os.path.basename(u.path) for u in at_once.after_save(callback)] == ["last.ckpt"]  # a new `last`
    callback.save_top_k = 1
    at_end = ModelUploads(True, "L")
    assert at_end.after_save(callback) == [] and at_end.after_save(callback) == []
    assert sorted(os.path.basename(u.path) for u in at_end.at_end()) == ["a.ckpt", "last.ckpt"]  # once, at the end
    assert at_end.at_end() == []
    assert ModelUploads(False, "L").after_save(callback) == [] and not ModelUploads(False, "L").active
