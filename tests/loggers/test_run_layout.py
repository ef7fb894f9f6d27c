"""Where a Trainer run keeps its files, and how a resumed run continues its logs.

A run's default checkpoints live under its log version (``{root}/stoker_logs/version_N/checkpoints``, as
Lightning's); without a logger in ``{root}/checkpoints``; an explicit ``dirpath`` wins. A run resumed with
``ckpt_path`` writes into the version the checkpoint was written under, and TensorBoard (read back with its own
``EventAccumulator``) and ``metrics.csv`` hold each step once: what the interrupted run logged after the
checkpoint's step is replaced by the resumed run's values.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest

from stoker import CSVLogger, ModelCheckpoint, TensorBoardLogger
from stoker.loggers import Logger
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import tensorboard_scalars
from tests.helpers.trainers import quiet_trainer


class Marked(Regressor):
    """Also logs ``run``: which process of the test (0 the interrupted, 1 the resumed) logged a step."""

    def __init__(self, run: int) -> None:
        super().__init__()
        self.run = run

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("run", float(self.run))
        return super().training_step(batch, batch_idx)


def loader() -> Any:
    return make_loader(make_regression_data(n=32), batch_size=8)  # 4 steps an epoch


def loggers(root: Path) -> list[Any]:
    return [TensorBoardLogger(root), CSVLogger(root)]


def csv_rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(logger.metrics_file_path, newline="") as f:
        return list(csv.DictReader(f))


def test_checkpoints_live_under_the_first_loggers_version(tmp_path: Path) -> None:
    for expected in (0, 1):
        trainer = quiet_trainer(max_steps=4, logger=loggers(tmp_path), enable_checkpointing=True,
                                log_every_n_steps=1, default_root_dir=str(tmp_path))
        trainer.fit(Regressor(), loader())
        folder = tmp_path / "stoker_logs" / f"version_{expected}"
        assert trainer.checkpoint_callback.dirpath == str(folder / "checkpoints")
        assert (folder / "checkpoints" / "epoch=0-step=4.ckpt").is_dir()  # Lightning's name (no `last` unless asked)
        assert trainer.log_dir == str(folder) and (folder / "metrics.csv").is_file()
    assert not (tmp_path / "checkpoints").exists()


def test_name_sub_dir_and_string_versions_follow_lightning(tmp_path: Path) -> None:
    """``{save_dir}/{name}/{version}/checkpoints`` of the first logger: its ``sub_dir`` is not part of it."""
    first = TensorBoardLogger(tmp_path / "tb", name="exp", version="trial", sub_dir="events")
    trainer = quiet_trainer(max_steps=2, logger=[first, CSVLogger(tmp_path / "csv")], enable_checkpointing=True,
                            default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader())
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "tb" / "exp" / "trial" / "checkpoints")


def test_without_a_logger_and_with_an_explicit_dirpath(tmp_path: Path) -> None:
    trainer = quiet_trainer(max_steps=2, enable_checkpointing=True, default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader())
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "checkpoints")
    mine = ModelCheckpoint(dirpath=tmp_path / "mine", save_last=True)
    trainer = quiet_trainer(max_steps=2, logger=loggers(tmp_path), callbacks=[mine], enable_checkpointing=True,
                            default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader())
    assert mine.dirpath == str(tmp_path / "mine") and (tmp_path / "mine" / "last.ckpt").is_dir()
    assert not (tmp_path / "stoker_logs" / "version_0" / "checkpoints").exists()


def interrupted_then_resumed(tmp_path: Path, ckpt_path: Any) -> tuple[Any, Any]:
    """Run 0 trains 8 steps, saving at step 4 and 8; run 1 resumes from ``ckpt_path`` to step 12."""
    saver = ModelCheckpoint(every_n_train_steps=4, save_top_k=-1, save_last=True)
    first = quiet_trainer(max_steps=8, logger=loggers(tmp_path), callbacks=[saver], log_every_n_steps=1,
                          enable_checkpointing=True, default_root_dir=str(tmp_path))
    first.fit(Marked(0), loader())
    resumed = quiet_trainer(max_steps=12, logger=loggers(tmp_path), enable_checkpointing=True,
                            log_every_n_steps=1, default_root_dir=str(tmp_path))
    resumed.fit(Marked(1), loader(), ckpt_path=ckpt_path(saver.dirpath) if callable(ckpt_path) else ckpt_path)
    return first, resumed


def test_resume_continues_the_same_version_with_one_curve(tmp_path: Path) -> None:
    first, resumed = interrupted_then_resumed(tmp_path, lambda d: os.path.join(d, "epoch=0-step=4.ckpt"))
    folder = str(tmp_path / "stoker_logs" / "version_0")
    assert [lg.log_dir for lg in resumed.loggers] == [folder, folder]
    assert resumed.checkpoint_callback.dirpath == os.path.join(folder, "checkpoints")
    assert not (tmp_path / "stoker_logs" / "version_1").exists()
    # TensorBoard: steps 5-8 of the interrupted run are hidden (purge_step); each step once, never going back.
    scalars = tensorboard_scalars(folder)
    for tag in ("train/loss", "run"):
        steps = [s for s, _ in scalars[tag]]
        assert steps == list(range(1, 13)), (tag, steps)
    assert [v for _, v in scalars["run"]] == [0.0] * 4 + [1.0] * 8
    # CSV: the interrupted run's rows up to step 4 kept, its later ones replaced by the resumed run's.
    rows = [r for r in csv_rows(resumed.loggers[1]) if r["run"] != ""]
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    assert [float(r["run"]) for r in rows] == [0.0] * 4 + [1.0] * 8
    assert [int(r["step"]) for r in csv_rows(resumed.loggers[1])] == sorted(int(r["step"])
                                                                           for r in csv_rows(resumed.loggers[1]))


def test_ckpt_path_last_finds_the_newest_run_across_versions(tmp_path: Path) -> None:
    """version_0 ran to step 8; a fresh run (version_1) saved at step 4 and stopped; "last" resumes version_1."""
    first = quiet_trainer(max_steps=8, logger=loggers(tmp_path), enable_checkpointing=True,
                          default_root_dir=str(tmp_path))
    first.fit(Regressor(), loader())
    second = quiet_trainer(max_steps=4, logger=loggers(tmp_path), enable_checkpointing=True,
                           default_root_dir=str(tmp_path))
    second.fit(Regressor(), loader())  # its own folder: no "holds checkpoints of an earlier run" warning
    assert second.log_dir == str(tmp_path / "stoker_logs" / "version_1")
    third = quiet_trainer(max_steps=6, logger=loggers(tmp_path), enable_checkpointing=True,
                          default_root_dir=str(tmp_path))
    third.fit(Regressor(), loader(), ckpt_path="last")
    assert third.global_step == 6 and third.log_dir == str(tmp_path / "stoker_logs" / "version_1")
    assert not (tmp_path / "stoker_logs" / "version_2").exists()


def test_ckpt_path_last_finds_a_checkpoint_of_the_old_layout(tmp_path: Path) -> None:
    """A run written before checkpoints moved under the version: ``{root}/checkpoints/last``."""
    old = quiet_trainer(max_steps=4, default_root_dir=str(tmp_path))
    old.fit(Regressor(), loader())
    old.save_checkpoint(tmp_path / "checkpoints" / "last")
    trainer = quiet_trainer(max_steps=6, logger=loggers(tmp_path), enable_checkpointing=True,
                            default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader(), ckpt_path="last")
    assert trainer.global_step == 6
    # It recorded no versions (no loggers): the run starts a version of its own.
    assert trainer.log_dir == str(tmp_path / "stoker_logs" / "version_0")


def test_a_version_given_to_the_logger_wins_over_the_checkpoints(tmp_path: Path) -> None:
    interrupted_then_resumed(tmp_path, lambda d: os.path.join(d, "last.ckpt"))
    trainer = quiet_trainer(max_steps=14, logger=TensorBoardLogger(tmp_path, version=5),
                            default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader(), ckpt_path=tmp_path / "stoker_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert trainer.log_dir == str(tmp_path / "stoker_logs" / "version_5")


def test_continue_run_on_the_loggers_alone(tmp_path: Path) -> None:
    """A run logged steps 0-9, its checkpoint was at step 4: a logger continuing it shows 0-4 of the first run,
    then the new values, each step once (TensorBoard's ``hp_metric`` too, logged again at step 0)."""
    for cls in (TensorBoardLogger, CSVLogger):
        first = cls(tmp_path / cls.__name__)
        first.log_hyperparams({"lr": 0.1})
        for step in range(10):
            first.log_metrics({"loss": float(step)}, step=step)
        first.finalize("failed")
        again = cls(tmp_path / cls.__name__)
        assert again.version == 1  # before continue_run: a new version, as for a fresh run
        again.continue_run(0, 4)
        again.log_hyperparams({"lr": 0.1})
        for step in range(5, 8):
            again.log_metrics({"loss": 100.0 + step}, step=step)
        again.log_metrics({"loss": 200.0})  # step=None continues after the largest step
        again.finalize("success")
        assert again.log_dir == first.log_dir
        expected = [(s, float(s)) for s in range(5)] + [(s, 100.0 + s) for s in range(5, 8)] + [(8, 200.0)]
        if cls is TensorBoardLogger:
            scalars = tensorboard_scalars(again.log_dir)
            assert [(s, v) for s, v in scalars["loss"]] == expected
            assert [s for s, _ in scalars["hp_metric"]] == [0]
        else:
            assert [(int(r["step"]), float(r["loss"])) for r in csv_rows(again)] == expected
    given = CSVLogger(tmp_path, version=3)
    given.continue_run(0, 4)
    assert given.version == 3


def test_the_checkpoint_records_the_logger_versions(tmp_path: Path) -> None:
    from stoker.trainer.components import recorded_logger_runs

    trainer = quiet_trainer(max_steps=2, logger=[TensorBoardLogger(tmp_path, version="named"), CSVLogger(tmp_path)],
                            default_root_dir=str(tmp_path))
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "ckpt")
    root = str(tmp_path / "stoker_logs")
    assert recorded_logger_runs(str(tmp_path / "ckpt")) == ([("named", root), (0, root)], 2)
    assert recorded_logger_runs(str(tmp_path / "missing")) is None


def test_a_checkpoint_from_another_experiment_starts_a_new_version(tmp_path: Path) -> None:
    """Resuming a checkpoint written under ``elsewhere/`` must not append to (and purge) this root's version_0."""
    here = quiet_trainer(max_steps=8, logger=loggers(tmp_path / "here"), log_every_n_steps=1,
                         default_root_dir=str(tmp_path / "here"))
    here.fit(Regressor(), loader())
    other = quiet_trainer(max_steps=4, logger=loggers(tmp_path / "elsewhere"), enable_checkpointing=True,
                          default_root_dir=str(tmp_path / "elsewhere"))
    other.fit(Regressor(), loader())
    resumed = quiet_trainer(max_steps=6, logger=loggers(tmp_path / "here"), log_every_n_steps=1,
                            default_root_dir=str(tmp_path / "here"))
    resumed.fit(Regressor(), loader(), ckpt_path=other.checkpoint_callback.best_model_path)
    assert resumed.log_dir == str(tmp_path / "here" / "stoker_logs" / "version_1")
    assert [s for s, _ in tensorboard_scalars(here.log_dir)["train/loss"]] == list(range(1, 9))  # untouched


class KeepsNoFiles(Logger):
    """A logger written as for Lightning: ``super().__init__()`` with no folder, its name and version its own."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []

    @property
    def name(self) -> str:
        return "Buffer"

    @property
    def version(self) -> int:
        return 1

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.rows.append(dict(metrics))


def test_a_logger_without_a_folder_keeps_the_runs_checkpoints_under_default_root_dir(tmp_path, monkeypatch):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # nothing may land in the working directory
    logger = KeepsNoFiles()
    assert logger.save_dir is None and logger.log_dir is None
    trainer = quiet_trainer(default_root_dir=tmp_path / "root", logger=logger, max_epochs=1,
                            enable_checkpointing=True, log_every_n_steps=1)
    trainer.fit(Regressor(), loader())
    trainer.accelerator.wait_for_checkpoints()
    assert list(elsewhere.iterdir()) == []
    kept = tmp_path / "root" / "Buffer" / "version_1" / "checkpoints"
    assert [p.name for p in kept.iterdir()] == ["epoch=0-step=4.ckpt"] and logger.rows


def test_such_a_logger_without_its_own_version_is_numbered_where_its_run_goes(tmp_path):
    class Unversioned(Logger):
        def log_metrics(self, metrics: dict, step: int | None = None) -> None:
            pass

    for expected in ("version_0", "version_1"):
        trainer = quiet_trainer(default_root_dir=tmp_path, logger=Unversioned(), max_epochs=1,
                                enable_checkpointing=True, log_every_n_steps=1)
        trainer.fit(Regressor(), loader())
        trainer.accelerator.wait_for_checkpoints()
        assert (tmp_path / "stoker_logs" / expected / "checkpoints" / "epoch=0-step=4.ckpt").is_dir()


def fit_with(root: Path, logger: Logger) -> None:
    trainer = quiet_trainer(default_root_dir=str(root), logger=logger, enable_checkpointing=True, max_epochs=1)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=8), batch_size=4))


def test_a_logger_whose_name_or_version_is_a_method_gets_a_clear_error(tmp_path):
    class MethodNamed(Logger):
        def name(self):  # a property was meant
            return "runs"

        def log_metrics(self, metrics, step=None):
            pass

        def log_hyperparams(self, *args, **kwargs):
            pass

    with pytest.raises(TypeError, match=r"MethodNamed\.name is a method, not a str\. Make it a property"):
        fit_with(tmp_path, MethodNamed())

    class MethodVersioned(MethodNamed):
        name = "runs"

        def version(self):
            return 1

    with pytest.raises(TypeError, match=r"MethodVersioned\.version is a method, not an int or a str"):
        fit_with(tmp_path, MethodVersioned())


def test_a_logger_whose_version_reads_none_still_runs(tmp_path):
    class NoVersion(Logger):  # Lightning places its run under "version_None"; so does stoker
        @property
        def version(self):
            return None

        def log_metrics(self, metrics, step=None):
            pass

        def log_hyperparams(self, *args, **kwargs):
            pass

    fit_with(tmp_path, NoVersion())
    assert os.path.isdir(tmp_path / "stoker_logs" / "version_None" / "checkpoints")
