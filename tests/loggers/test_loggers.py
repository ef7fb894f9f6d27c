import argparse
import csv
import os
from pathlib import Path

import pytest
import torch
import yaml

from stoker.loggers import CSVLogger, Logger, TensorBoardLogger, build_loggers
from tests.helpers.forkserver import run_python
from tests.helpers.trackers_readback import tensorboard_events, tensorboard_scalars

REPO_ROOT = Path(__file__).resolve().parents[2]


def _read_csv(logger: CSVLogger) -> tuple[list[str], list[dict[str, str]]]:
    with open(logger.metrics_file_path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


# --- base -----------------------------------------------------------------------------------------


def test_subclass_overriding_only_log_metrics_works(tmp_path):
    seen = []

    class ListLogger(Logger):
        def log_metrics(self, metrics, step=None):
            seen.append((step, dict(metrics)))

    logger = ListLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=2)
    logger.log_hyperparams({"lr": 0.1})
    logger.flush()
    logger.finalize("success")
    logger.finalize("success")
    assert seen == [(2, {"loss": 1.0})]
    assert logger.log_dir == os.path.join(str(tmp_path), "stoker_logs", "version_0")
    assert not (tmp_path / "stoker_logs").exists()


def test_version_resolution_is_lazy_and_scans_existing_folders(tmp_path):
    root = tmp_path / "exp"
    (root / "version_0").mkdir(parents=True)
    (root / "version_4").mkdir()
    (root / "version_x").mkdir()  # not a version folder
    (root / "version_9").write_text("a file, not a folder")
    logger = CSVLogger(tmp_path, name="exp")
    (root / "version_7").mkdir()  # appears after construction: lazy resolution sees it
    assert logger.version == 8
    assert logger.log_dir == str(root / "version_8")


def test_int_and_string_versions(tmp_path):
    assert CSVLogger(tmp_path, name="exp", version=3).log_dir == str(tmp_path / "exp" / "version_3")
    assert CSVLogger(tmp_path, name="exp", version="run-a").log_dir == str(tmp_path / "exp" / "run-a")
    with pytest.raises(TypeError, match="version=1.5"):
        CSVLogger(tmp_path, version=1.5)


def test_constructors_create_no_directories(tmp_path):
    TensorBoardLogger(tmp_path / "tb")
    CSVLogger(tmp_path / "csv")
    build_loggers(["tensorboard", "csv"], tmp_path / "both")
    assert list(tmp_path.iterdir()) == []


def test_non_scalar_tensor_metric_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="'acc' is a tensor of shape \\(3,\\)"):
        CSVLogger(tmp_path).log_metrics({"acc": torch.ones(3)}, step=0)
    with pytest.raises(TypeError, match="'name'"):
        CSVLogger(tmp_path).log_metrics({"name": "abc"}, step=0)


# --- TensorBoard ----------------------------------------------------------------------------------


def test_tensorboard_scalars_read_back_at_their_steps(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"train/loss": torch.tensor(0.5), "lr": 0.1}, step=1)
    logger.log_metrics({"train/loss": 0.25}, step=5)
    logger.log_metrics({"train/loss": 0.125})  # step=None -> one past the largest step (6)
    logger.finalize("success")

    acc = tensorboard_events(logger.log_dir)
    assert set(acc.Tags()["scalars"]) == {"train/loss", "lr"}
    loss = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert loss == [(1, 0.5), (5, 0.25), (6, 0.125)]
    assert [(e.step, pytest.approx(e.value)) for e in acc.Scalars("lr")] == [(1, 0.1)]


def test_tensorboard_writes_one_event_per_log_metrics_call(tmp_path):
    """All metrics of a call travel to the writer thread as one event (one Summary, a value per metric)."""
    import glob

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({f"m{i}": float(i) for i in range(5)}, step=3)
    logger.log_metrics({"m0": 9.0}, step=4)
    logger.finalize("success")
    [path] = glob.glob(os.path.join(logger.log_dir, "events.out.tfevents.*"))
    events = [e for e in EventFileLoader(path).Load() if e.HasField("summary")]
    assert [(e.step, [v.tag for v in e.summary.value]) for e in events] == [
        (3, ["m0", "m1", "m2", "m3", "m4"]), (4, ["m0"])]
    acc = tensorboard_events(logger.log_dir)
    assert [(e.step, e.value) for e in acc.Scalars("m4")] == [(3, 4.0)]


def test_tensorboard_versions_increment(tmp_path):
    first = TensorBoardLogger(tmp_path, name="exp")
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("success")
    second = TensorBoardLogger(tmp_path, name="exp")
    second.log_metrics({"a": 2.0}, step=0)
    second.finalize("success")
    assert first.version == 0 and second.version == 1
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["version_0", "version_1"]
    assert [e.value for e in tensorboard_events(second.log_dir).Scalars("a")] == [2.0]


def test_tensorboard_finalize_is_idempotent_and_logging_after_reopens(tmp_path):
    logger = TensorBoardLogger(tmp_path, flush_secs=1)
    logger.finalize("success")  # before any write: nothing to close, no folder
    assert not os.path.exists(logger.log_dir)
    logger.log_metrics({"x": 1.0}, step=0)
    logger.finalize("success")
    logger.finalize("failed")
    logger.log_metrics({"x": 2.0}, step=1)
    logger.flush()
    logger.finalize("success")
    assert [(e.step, e.value) for e in tensorboard_events(logger.log_dir).Scalars("x")] == [(0, 1.0), (1, 2.0)]


def test_tensorboard_hparams_flattened_in_same_run(tmp_path):
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams(
        argparse.Namespace(lr=0.01, opt={"name": "adamw", "betas": (0.9, 0.99)}, flag=None, w=torch.tensor(2.0))
    )
    logger.finalize("success")

    acc = tensorboard_events(logger.log_dir)
    content = acc.PluginTagToContent("hparams")
    start = HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hp = start.hparams
    assert hp["lr"].number_value == pytest.approx(0.01)
    assert hp["opt/name"].string_value == "adamw"
    assert hp["opt/betas"].string_value == "(0.9, 0.99)"
    assert hp["flag"].string_value == "None"
    assert hp["w"].number_value == 2.0
    # Written into the run folder itself, not a timestamped sub-run like SummaryWriter.add_hparams.
    assert [p.name for p in Path(logger.log_dir).iterdir() if p.is_dir()] == []


def test_tensorboard_rejects_log_dir_kwarg(tmp_path):
    with pytest.raises(TypeError, match="log_dir"):
        TensorBoardLogger(tmp_path, log_dir="elsewhere")


# --- CSV ------------------------------------------------------------------------------------------


def test_csv_merges_same_step_and_widens_header(tmp_path):
    logger = CSVLogger(tmp_path, flush_every_n_steps=2)
    logger.log_metrics({"train/loss": torch.tensor(1.5)}, step=0)
    logger.log_metrics({"train/loss": 1.25}, step=1)
    logger.log_metrics({"train/loss": 1.0}, step=2)  # 3 rows buffered: steps 0 and 1 are written
    header, rows = _read_csv(logger)
    assert header == ["step", "train/loss"]
    assert [r["step"] for r in rows] == ["0", "1"]

    logger.log_metrics({"val/acc": 0.5}, step=2)  # same step as the open row -> merged
    logger.log_metrics({"train/loss": 0.75, "lr": 3}, step=3)
    logger.finalize("success")

    header, rows = _read_csv(logger)
    assert header == ["step", "train/loss", "val/acc", "lr"]
    assert rows == [
        {"step": "0", "train/loss": "1.5", "val/acc": "", "lr": ""},
        {"step": "1", "train/loss": "1.25", "val/acc": "", "lr": ""},
        {"step": "2", "train/loss": "1.0", "val/acc": "0.5", "lr": ""},
        {"step": "3", "train/loss": "0.75", "val/acc": "", "lr": "3"},
    ]


def test_csv_merges_into_a_row_already_flushed(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=7)
    logger.flush()
    logger.log_metrics({"b": 2.0}, step=7)
    logger.log_metrics({"a": 3.0}, step=8)
    logger.finalize("success")
    logger.finalize("success")
    header, rows = _read_csv(logger)
    assert header == ["step", "a", "b"]
    assert rows == [{"step": "7", "a": "1.0", "b": "2.0"}, {"step": "8", "a": "3.0", "b": ""}]


def test_csv_buffers_until_flush(tmp_path):
    logger = CSVLogger(tmp_path, flush_every_n_steps=100)
    for step in range(5):
        logger.log_metrics({"loss": float(step)}, step=step)
    assert not os.path.exists(logger.metrics_file_path)
    logger.flush()
    assert [r["loss"] for r in _read_csv(logger)[1]] == ["0.0", "1.0", "2.0", "3.0", "4.0"]
    with pytest.raises(ValueError, match="flush_every_n_steps=0"):
        CSVLogger(tmp_path, flush_every_n_steps=0)


def test_csv_appends_to_existing_file_of_reused_version(tmp_path):
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("interrupted")
    resumed = CSVLogger(tmp_path, version=0)
    resumed.log_metrics({"a": 2.0}, step=1)
    resumed.log_metrics({"b": 5.0}, step=2)
    resumed.finalize("success")
    header, rows = _read_csv(resumed)
    assert header == ["step", "a", "b"]
    assert [(r["step"], r["a"], r["b"]) for r in rows] == [("0", "1.0", ""), ("1", "2.0", ""), ("2", "", "5.0")]


def test_csv_hparams_written_and_merged(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams({"lr": torch.tensor(0.5), "model": {"layers": [2, 3]}, "path": Path("/data")})
    logger.log_hyperparams(argparse.Namespace(seed=7))
    text = (Path(logger.log_dir) / "hparams.yaml").read_text()
    assert yaml.safe_load(text) == {"lr": 0.5, "model": {"layers": [2, 3]}, "path": "/data", "seed": 7}


def test_csv_versions_increment(tmp_path):
    for expected in (0, 1):
        logger = CSVLogger(tmp_path)
        logger.log_metrics({"a": 1}, step=0)
        logger.finalize("success")
        assert logger.log_dir == str(tmp_path / "stoker_logs" / f"version_{expected}")
        assert os.path.exists(logger.metrics_file_path)


# --- build_loggers --------------------------------------------------------------------------------


def test_build_loggers_spec_kinds(tmp_path):
    assert build_loggers(None, tmp_path) == []

    (tb,) = build_loggers("TensorBoard", tmp_path, name="exp")
    assert isinstance(tb, TensorBoardLogger) and tb.save_dir == str(tmp_path) and tb.name == "exp"

    (c,) = build_loggers("csv", tmp_path)
    assert isinstance(c, CSVLogger) and c.name == "stoker_logs"

    mine = CSVLogger(tmp_path / "mine")
    assert build_loggers(mine, tmp_path)[0] is mine

    mixed = build_loggers(["csv", mine, "tensorboard"], tmp_path)
    assert [type(x) for x in mixed] == [CSVLogger, CSVLogger, TensorBoardLogger]
    assert mixed[1] is mine


def test_build_loggers_string_loggers_share_one_version_folder(tmp_path):
    (tmp_path / "stoker_logs" / "version_0").mkdir(parents=True)
    tb, c = build_loggers(["tensorboard", "csv"], tmp_path)
    tb.log_metrics({"a": 1.0}, step=0)  # creates version_1 before the CSV logger resolves
    c.log_metrics({"a": 1.0}, step=0)
    tb.finalize("success")
    c.finalize("success")
    assert tb.log_dir == c.log_dir == str(tmp_path / "stoker_logs" / "version_1")
    assert os.path.exists(c.metrics_file_path)


@pytest.mark.parametrize("bad", ["neptune", 3, True, ["csv", "comet"], [["csv"]]])
def test_build_loggers_rejects_unknown_spec(tmp_path, bad):
    with pytest.raises(ValueError, match="is not a supported logger. Expected one of: 'tensorboard', 'csv'"):
        build_loggers(bad, tmp_path)


def test_build_loggers_error_quotes_the_bad_value(tmp_path):
    with pytest.raises(ValueError) as info:
        build_loggers("neptune", tmp_path)
    assert str(info.value) == (
        "log_with='neptune' is not a supported logger. Expected one of: 'tensorboard', 'csv', 'wandb', 'mlflow', "
        "'comet_ml', 'all', a stoker Logger instance, or a list of these."
    )
    with pytest.raises(ValueError, match="'csv' twice"):
        build_loggers(["csv", "CSV"], tmp_path)


# --- import cost ----------------------------------------------------------------------------------


def test_importing_loggers_does_not_import_tensorboard():
    code = (
        "import sys, stoker, stoker.loggers\n"
        "from stoker.loggers import TensorBoardLogger\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'tensorboard' or m == 'torch.utils.tensorboard')\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = run_python(["-c", code], env=env, timeout=120)  # a process without stoker or tensorboard loaded
    assert result.returncode == 0, result.stderr


def test_tensorboard_logger_pickles_without_its_open_writer(tmp_path):
    import pickle

    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    logger.finalize("success")
    assert copy.log_dir == logger.log_dir
    copy.log_metrics({"a": 2.0}, step=1)
    copy.finalize("success")
    assert [e.value for e in tensorboard_events(logger.log_dir).Scalars("a")] == [1.0, 2.0]


def test_hyperparams_of_unsupported_type_are_rejected(tmp_path):
    with pytest.raises(TypeError, match="log_hyperparams got list"):
        CSVLogger(tmp_path).log_hyperparams([("lr", 0.1)])


# --- no value lost (issue 11, item 6) ------------------------------------------------------------------------


def test_csv_a_value_that_would_be_replaced_starts_a_new_row(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"train/loss": 1.0, "epoch": 1}, step=8)
    logger.log_metrics({"val/loss": 0.5, "epoch": 1}, step=8)  # equal epoch, new metric: same row
    logger.log_metrics({"val/loss": 0.25, "epoch": 1}, step=8)  # would replace 0.5: a row of its own
    logger.log_metrics({"val/loss": float("nan")}, step=9)
    logger.log_metrics({"val/loss": float("nan"), "b": 2}, step=9)  # NaN again replaces nothing
    logger.finalize("success")
    header, rows = _read_csv(logger)
    assert header == ["step", "train/loss", "epoch", "val/loss", "b"]
    assert [(r["step"], r["train/loss"], r["epoch"], r["val/loss"], r["b"]) for r in rows] == [
        ("8", "1.0", "1", "0.5", ""), ("8", "", "1", "0.25", ""), ("9", "", "", "nan", "2")]


def test_csv_a_flushed_row_is_never_overwritten(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1.0, "epoch": 0}, step=7)
    logger.flush()
    logger.log_metrics({"a": 2.0, "epoch": 1}, step=7)  # both differ: a new row, the written one stays
    logger.flush()
    logger.log_metrics({"b": 3.0, "epoch": 1}, step=7)  # grows the newest row (on disk since the flush)
    logger.finalize("success")
    _, rows = _read_csv(logger)
    assert [(r["step"], r["a"], r["epoch"], r["b"]) for r in rows] == [
        ("7", "1.0", "0", ""), ("7", "2.0", "1", "3.0")]


def test_csv_resumed_file_rows_are_kept_when_the_same_step_is_logged_again(tmp_path):
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"a": 1.0}, step=4)
    first.finalize("interrupted")
    resumed = CSVLogger(tmp_path, version=0)
    resumed.log_metrics({"a": 1.5}, step=4)
    resumed.finalize("success")
    assert [(r["step"], r["a"]) for r in _read_csv(resumed)[1]] == [("4", "1.0"), ("4", "1.5")]


def test_build_loggers_gives_unversioned_instances_one_version(tmp_path):
    (tmp_path / "stoker_logs" / "version_0").mkdir(parents=True)
    tb, c = TensorBoardLogger(tmp_path), CSVLogger(tmp_path)
    built = build_loggers([tb, c, "csv"], tmp_path, name="other")
    tb.log_metrics({"a": 1.0}, step=0)  # creates version_1 before the others resolve
    tb.finalize("success")
    assert [lg.version for lg in built] == [1, 1, 1]


def test_tensorboard_reopened_writer_sorts_after_the_first_whatever_the_writer_count(tmp_path):
    """TensorBoard reads event files in name order; the writer number in the name sorts as text ("10" < "9"), so a
    writer reopened in the same second as the ninth of the process must still land after it."""
    from torch.utils.tensorboard import SummaryWriter

    for i in range(10):  # until the last writer was number ...8: the logger's is then ...9, the reopened one ...10
        folder = tmp_path / "other" / str(i)
        SummaryWriter(str(folder)).close()
        if int(os.listdir(folder)[0].rsplit(".", 1)[1]) % 10 == 8:
            break
    logger = TensorBoardLogger(tmp_path, flush_secs=1)
    logger.log_metrics({"x": 1.0}, step=0)
    logger.finalize("success")
    logger.log_metrics({"x": 2.0}, step=1)
    logger.finalize("success")
    names = sorted(os.listdir(logger.log_dir))
    assert len(names) == 2
    assert [(e.step, e.value) for e in tensorboard_events(logger.log_dir).Scalars("x")] == [(0, 1.0), (1, 2.0)], names


# --- TensorBoard: Lightning's options ------------------------------------------------------------------------


def test_tensorboard_lightning_options_prefix_sub_dir_and_hp_metric(tmp_path):
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    logger = TensorBoardLogger(tmp_path, name="exp", version=0, prefix="train", sub_dir="fold_1")
    assert logger.log_dir == os.path.join(str(tmp_path), "exp", "version_0", "fold_1") and logger.sub_dir == "fold_1"
    logger.log_hyperparams({"lr": 0.1})  # no metrics: Lightning's placeholder hp_metric = -1, at step 0
    logger.log_metrics({"loss": 0.5})  # step=None: still the first step (the placeholder took none)
    logger.finalize("success")
    assert tensorboard_scalars(logger.log_dir) == {"train-hp_metric": [(0, -1.0)], "train-loss": [(0, 0.5)]}
    content = tensorboard_events(logger.log_dir).PluginTagToContent("hparams")
    experiment = HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["train-hp_metric"]

    quiet = TensorBoardLogger(tmp_path, name="quiet", default_hp_metric=False)
    quiet.log_hyperparams({"lr": 0.1})
    quiet.log_hyperparams({"lr": 0.1}, metrics=0.75, step=3)  # one number: hp_metric
    quiet.finalize("success")
    assert tensorboard_scalars(quiet.log_dir) == {"hp_metric": [(3, 0.75)]}


def test_tensorboard_log_graph_traces_the_example_input(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    off = TensorBoardLogger(tmp_path, name="off")
    off.log_graph(model, torch.zeros(2, 4))  # log_graph=False: nothing, no folder
    assert not os.path.exists(off.log_dir)
    logger = TensorBoardLogger(tmp_path, name="on", log_graph=True)
    with pytest.warns(RuntimeWarning, match="example_input_array"):
        logger.log_graph(model)  # no input: a warning, nothing written
    model.example_input_array = torch.zeros(2, 4)
    logger.log_graph(model)
    logger.finalize("success")
    graph = tensorboard_events(logger.log_dir).Graph()
    assert any("Linear" in node.op or "linear" in node.op for node in graph.node), [n.op for n in graph.node]


@pytest.mark.parametrize("kwargs, match", [({"log_graph": 1}, "log_graph=1"), ({"prefix": 3}, "prefix=3"),
                                           ({"sub_dir": 2}, "sub_dir=2"), ({"default_hp_metric": "no"}, "default_hp")])
def test_tensorboard_lightning_options_are_checked(tmp_path, kwargs, match):
    with pytest.raises(TypeError, match=match):
        TensorBoardLogger(tmp_path, **kwargs)


@pytest.mark.parametrize("logger_class", [TensorBoardLogger, CSVLogger])
def test_a_logger_off_the_main_process_answers_experiment_with_a_dummy_that_writes_nothing(tmp_path, logger_class):
    from stoker.loggers.logger import DummyExperiment

    logger = logger_class(tmp_path)
    logger.on_main_process = False  # what the Trainer sets on the other processes of a multi-process run
    experiment = logger.experiment
    assert isinstance(experiment, DummyExperiment)
    experiment.add_scalar("direct", 1.0, 0)  # a script's own call: accepted, nothing written
    experiment.log_metrics({"direct": 1.0}, 0)
    assert list(tmp_path.iterdir()) == []
    logger.on_main_process = True
    assert not isinstance(logger.experiment, DummyExperiment) and list(tmp_path.iterdir())


def test_a_logger_given_to_the_trainer_later_is_told_whether_it_is_on_the_main_process(tmp_path, monkeypatch):
    from stoker import Trainer
    from stoker.loggers import DummyExperiment

    trainer = Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    monkeypatch.setattr(type(trainer), "is_global_zero", property(lambda self: False))  # as on another process
    trainer.logger = TensorBoardLogger(tmp_path)
    assert trainer.logger.on_main_process is False and isinstance(trainer.logger.experiment, DummyExperiment)
    monkeypatch.undo()
    trainer.logger = CSVLogger(tmp_path)
    assert trainer.logger.on_main_process is True
