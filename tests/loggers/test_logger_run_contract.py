"""What a Trainer run gives its loggers (Lightning's contract): the hyperparameters of the module and datamodule
(unless saved with ``logger=False``; a key the two give different values stops the run), a logged ``step`` as the
x-axis, and a run folder under ``default_root_dir`` for a logger that keeps no files (``save_dir`` None)."""

from __future__ import annotations

import argparse
import os

import pytest
import torch

from stoker import DataModule, Trainer
from stoker.loggers import Logger
from tests.callbacks.modules import loaders
from tests.helpers.models import Regressor


class Recorder(Logger):
    """Keeps what it is sent; ``save_dir`` None: it writes no files."""

    def __init__(self) -> None:
        super().__init__(name="rec", version="a")
        self.params: list[dict] = []
        self.logged: list[tuple[int, dict]] = []

    @property
    def save_dir(self) -> None:
        return None

    def log_hyperparams(self, params):
        self.params.append(dict(params))

    def log_metrics(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))


class Data(DataModule):
    def __init__(self, lr: float = 0.05, size: torch.Tensor | None = None, logger: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters("lr", "size", logger=logger)

    def train_dataloader(self):
        return loaders()[0]


def _fit(tmp_path, module, logger, datamodule=None, **kw) -> Trainer:
    kw.setdefault("max_steps", 2)
    trainer = Trainer(default_root_dir=str(tmp_path), logger=logger, enable_progress_bar=False, seed=0, **kw)
    if datamodule is None:
        trainer.fit(module, loaders()[0])
    else:
        trainer.fit(module, datamodule=datamodule)
    return trainer


@pytest.mark.parametrize("send", [True, False])
def test_save_hyperparameters_logger_flag_decides_whether_the_loggers_get_them(tmp_path, send):
    class Model(Regressor):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters(logger=send)

    recorder = Recorder()
    model = Model()
    _fit(tmp_path, model, recorder, enable_checkpointing=False)
    assert model.hparams.width == 3  # kept either way
    assert recorder.params == ([dict(model.hparams)] if send else [])
    with pytest.raises(TypeError, match="logger='no'"):
        model.save_hyperparameters(logger="no")


def test_save_hyperparameters_takes_one_mapping_namespace_or_dataclass():
    class Model(Regressor):
        def __init__(self, params) -> None:
            super().__init__()
            self.save_hyperparameters(params, ignore="skip")

    assert Model({1: "one", "lr2": 0.5, "skip": 0}).hparams[1] == "one"
    assert "skip" not in Model({"skip": 0}).hparams
    assert Model(argparse.Namespace(depth=4)).hparams.depth == 4
    with pytest.raises(TypeError, match="got list"):
        Model([1, 2])
    with pytest.raises(TypeError, match="argument names"):
        Regressor().save_hyperparameters("lr", 3)


def test_module_and_datamodule_hyperparameters_reach_the_loggers_merged(tmp_path):
    recorder = Recorder()
    model = Regressor(lr=0.05)
    _fit(tmp_path, model, recorder, Data(lr=0.05, size=torch.tensor([2, 3])), enable_checkpointing=False)
    (sent,) = recorder.params
    assert sent["momentum"] == 0.9 and sent["lr"] == 0.05 and torch.equal(sent["size"], torch.tensor([2, 3]))

    recorder = Recorder()  # a datamodule saved with logger=False: only the module's, even with a clash
    _fit(tmp_path, Regressor(lr=0.05), recorder, Data(lr=0.5, logger=False), enable_checkpointing=False)
    assert recorder.params[0]["lr"] == 0.05 and "size" not in recorder.params[0]


def test_a_key_the_module_and_datamodule_disagree_on_stops_the_run_before_training(tmp_path):
    recorder = Recorder()
    model = Regressor(lr=0.05)
    with pytest.raises(RuntimeError, match=r"^Error while merging hparams: the keys \['lr'\] are present in both "
                                           r"the LightningModule's and LightningDataModule's hparams but have "
                                           r"different values.*'lr': 0.05 in the module, 0.5 in the"):
        _fit(tmp_path, model, recorder, Data(lr=0.5), enable_checkpointing=False)
    assert recorder.params == [] and recorder.logged == []


def test_a_logged_step_is_the_loggers_x_axis_and_not_a_metric(tmp_path):
    class Model(Regressor):
        def on_train_epoch_end(self) -> None:
            self.log_dict({"step": 41.0, "custom": 1.5})

    recorder = Recorder()
    _fit(tmp_path, Model(), recorder, max_epochs=1, max_steps=-1, log_every_n_steps=1, enable_checkpointing=False)
    at_41 = [metrics for step, metrics in recorder.logged if step == 41]
    assert at_41 and at_41[0]["custom"] == 1.5
    assert all("step" not in metrics for _, metrics in recorder.logged)


def test_a_logger_without_files_puts_the_runs_checkpoints_under_default_root_dir(tmp_path):
    recorder = Recorder()
    assert (recorder.root_dir, recorder.version_dir, recorder.log_dir) == (None, None, None)
    trainer = _fit(tmp_path, Regressor(), [recorder, Recorder()], log_every_n_steps=1)
    best = trainer.checkpoint_callback.best_model_path
    assert os.path.dirname(best) == str(tmp_path / "rec" / "a" / "checkpoints")
    assert recorder.logged and recorder.logged[-1][0] == 2
    assert "run_summary.json" not in os.listdir(tmp_path)  # the end-of-run summary has no folder to go to
    assert os.path.dirname(trainer.find_last_checkpoint()) == str(tmp_path / "rec" / "a" / "checkpoints")


def test_a_logger_whose_finalize_raises_still_frees_the_runs_checkpoint_folders(tmp_path):
    import threading

    class Failing(Recorder):
        def finalize(self, status):
            raise RuntimeError("the backend is down")

    with pytest.raises(RuntimeError, match="the backend is down"):
        _fit(tmp_path, Regressor(), [Failing()])  # its checkpoint is committed by a background thread
    assert [t.name for t in threading.enumerate() if t.name.startswith("stoker-")] == []
    trainer = _fit(tmp_path, Regressor(), [Recorder()])  # the folder is free for the next run
    assert trainer.checkpoint_callback.best_model_path


class Buffered(Logger):
    """A logger written to Lightning's contract: it holds values in ``log_metrics`` and writes them in ``save``."""

    def __init__(self, path: str) -> None:
        super().__init__(name="buffered", version="a")
        self.path, self.held, self.logs, self.saves = path, [], 0, 0

    @property
    def save_dir(self) -> None:
        return None

    def log_metrics(self, metrics, step=None) -> None:
        self.logs += 1
        self.held.append(f"{step},{float(metrics['train/loss']) if 'train/loss' in metrics else ''}")

    def save(self) -> None:
        self.saves += 1
        with open(self.path, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in self.held)
        self.held = []


def test_a_logger_that_writes_in_save_is_saved_after_each_log_and_at_the_end(tmp_path) -> None:
    logger = Buffered(str(tmp_path / "rows.txt"))
    trainer = Trainer(max_epochs=2, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Regressor(), loaders(n=32, batch_size=8)[0])
    assert logger.logs == 8 and logger.held == []  # 4 steps an epoch, each logged, each written at once
    assert logger.saves == 1 + logger.logs + 1  # when fit starts, after each log, and by finalize's default
    assert len((tmp_path / "rows.txt").read_text().splitlines()) == 8


def test_the_csv_logger_keeps_its_own_flush_rule_in_a_fit(tmp_path) -> None:
    from stoker.callbacks import Callback
    from stoker.loggers import CSVLogger

    seen: list[bool] = []

    class Look(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            seen.append(os.path.exists(trainer.logger.metrics_file_path))

    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1000)
    trainer = Trainer(max_epochs=1, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=[Look()])
    trainer.fit(Regressor(), loaders(n=32, batch_size=8)[0])
    assert seen == [False] * 4 and os.path.exists(logger.metrics_file_path)  # held until the end of the run
