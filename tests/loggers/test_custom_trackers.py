"""Custom trackers: a ``stoker.tracking.GeneralTracker`` subclass (Accelerate's ``accelerate.tracking`` renamed) in
``Accelerator(log_with=[...])`` is started, configured, logged to, found and finished as Accelerate does it; on
other processes only those with ``main_process_only = False`` exist. The face's tracker classes take Accelerate's
constructor arguments."""

from __future__ import annotations

import os
from typing import Any

import pytest

from stoker import Accelerator
from stoker.compat.accelerate.trackers import NullTracker, build_trackers, find_tracker
from stoker.tracking import GeneralTracker, TensorBoardTracker, get_available_trackers, on_main_process
from tests.helpers.trackers_readback import tensorboard_scalars


class RecordingTracker(GeneralTracker):
    """Records every call the Accelerator makes, as a user's tracker written for Accelerate would receive them."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self, main_process_only: bool = True) -> None:
        super().__init__()
        self.main_process_only = main_process_only
        self.calls: list[tuple[Any, ...]] = []

    @property
    def tracker(self) -> list[tuple[Any, ...]]:
        return self.calls

    def start(self) -> None:
        self.calls.append(("start",))

    def store_init_configuration(self, values: dict) -> None:
        self.calls.append(("config", dict(values)))

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(("log", dict(values), step, kwargs))

    def finish(self) -> None:
        self.calls.append(("finish",))


def test_a_custom_tracker_gets_accelerates_calls_beside_named_trackers(tmp_path):
    custom = RecordingTracker()
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", custom], project_dir=str(tmp_path))
    accelerator.init_trackers("exp", config={"lr": 0.1})
    assert [t.name for t in accelerator.trackers] == ["tensorboard", "recorder"]  # log_with's order
    accelerator.log({"loss": 0.5}, step=2, log_kwargs={"recorder": {"commit": False}})
    assert accelerator.get_tracker("recorder") is custom
    assert accelerator.get_tracker("recorder", unwrap=True) is custom.calls
    accelerator.end_training()

    assert custom.calls == [("start",), ("config", {"lr": 0.1}), ("log", {"loss": 0.5}, 2, {"commit": False}),
                            ("finish",)]
    assert tensorboard_scalars(accelerator.get_tracker("tensorboard").log_dir) == {"loss": [(2, 0.5)]}


def test_a_tracker_of_another_base_class_is_refused_at_construction():
    class Foreign:  # e.g. a subclass of accelerate.tracking.GeneralTracker left un-renamed
        name, requires_logging_directory, tracker = "foreign", False, None

        def store_init_configuration(self, values: dict) -> None: ...

        def log(self, values: dict, step: int | None = None) -> None: ...

    with pytest.raises(TypeError, match="Foreign, a tracker whose class is not stoker's GeneralTracker: subclass "
                                        r"stoker.tracking.GeneralTracker"):
        Accelerator(cpu=True, log_with=["csv", Foreign()])


def test_no_log_with_means_no_trackers(tmp_path):
    accelerator = Accelerator(cpu=True, project_dir=str(tmp_path))
    accelerator.init_trackers("exp", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=0)
    assert accelerator.trackers == [] and not os.listdir(tmp_path)
    with pytest.raises(ValueError, match=r"no such tracker. This Accelerator's trackers are \[\]"):
        accelerator.get_tracker("tensorboard")
    accelerator.end_training()


def test_custom_trackers_off_the_main_process(tmp_path):
    everywhere, main_only = RecordingTracker(main_process_only=False), RecordingTracker()
    everywhere.name = "everywhere"
    trackers = build_trackers(["csv", main_only, everywhere], tmp_path, "exp", {"lr": 0.1}, None,
                              is_main_process=False)
    assert trackers == [everywhere] and main_only.calls == []  # no logger is built there either
    assert everywhere.calls == [("start",), ("config", {"lr": 0.1})]
    assert find_tracker(trackers, "everywhere", False, is_main_process=False, initialized=True) is everywhere
    assert isinstance(find_tracker(trackers, "recorder", False, is_main_process=False, initialized=True), NullTracker)
    assert not os.listdir(tmp_path)


def test_a_tracker_class_without_the_required_attributes_says_which():
    class Incomplete(GeneralTracker):
        name = "incomplete"

    with pytest.raises(NotImplementedError, match=r"Incomplete is missing the tracker attributes "
                                                  r"\['requires_logging_directory', 'tracker'\]"):
        Incomplete()
    GeneralTracker(_blank=True)  # Accelerate's blank tracker: no checks


def test_accelerates_tracker_classes_take_its_constructor_arguments(tmp_path):
    tracker = TensorBoardTracker("exp", tmp_path, flush_secs=5)
    assert (tracker.name, tracker.run_name) == ("tensorboard", "exp")
    assert tracker.logging_dir == os.path.join(str(tmp_path), "exp", "version_0")
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("ignored")  # a tracker the script built keeps its own project
    assert accelerator.get_tracker("tensorboard") is tracker
    accelerator.log({"loss": 0.25}, step=1)
    accelerator.end_training()
    assert tensorboard_scalars(tracker.logging_dir) == {"loss": [(1, 0.25)]}
    assert "tensorboard" in get_available_trackers()


def test_on_main_process_runs_a_trackers_method_on_rank_zero_only(monkeypatch):
    class Tracker(RecordingTracker):
        @on_main_process
        def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
            super().log(values, step, **kwargs)

    monkeypatch.setenv("RANK", "1")
    on_rank_one, everywhere = Tracker(), Tracker(main_process_only=False)
    on_rank_one.log({"a": 1})
    everywhere.log({"a": 1})
    assert on_rank_one.calls == [] and len(everywhere.calls) == 1
    monkeypatch.setenv("RANK", "0")
    on_rank_one.log({"a": 1})
    assert len(on_rank_one.calls) == 1


@pytest.mark.slow  # the MLflow import and store: a few seconds
def test_the_mlflow_tracker_class_logs_metrics_and_files(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default store: sqlite under logging_dir
    from stoker.tracking import MLflowTracker
    from tests.helpers.trackers_readback import mlflow_client, mlflow_runs

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.txt").write_text("a")
    tracker = MLflowTracker(experiment_name="test_exp", logging_dir=tmp_path / "store", run_name="first")
    accelerator = Accelerator(cpu=True, log_with=tracker)
    accelerator.init_trackers(project_name="test_exp")
    with pytest.warns(UserWarning, match="left out"):
        tracker.log({"accuracy": 0.95, "loss": 0.1, "non_numeric": "ignored"}, step=10)
    tracker.log_artifact(tmp_path / "files" / "a.txt", artifact_path="one")
    tracker.log_artifacts(tmp_path / "files", artifact_path="all")
    accelerator.end_training()

    uri = tracker.tracking_uri
    (run,) = mlflow_runs(uri, "test_exp")
    assert run.data.metrics == {"accuracy": 0.95, "loss": 0.1} and run.info.status == "FINISHED"
    assert run.info.run_name == tracker.run_name == "first"
    listed = {a.path for folder in ("one", "all") for a in mlflow_client(uri).list_artifacts(run.info.run_id, folder)}
    assert listed == {"one/a.txt", "all/a.txt"} and tracker.name == "mlflow"


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_two_processes_hold_the_trackers_their_main_process_only_says(tmp_path):
    from tests.helpers.dist_spawn import read_results, run_workers

    run_workers(os.path.join(os.path.dirname(__file__), "dist_trackers_worker.py"), [tmp_path], timeout=150)
    main, other = read_results(tmp_path)
    assert main == {"trackers": ["tensorboard", "main_only", "everywhere"], "get_tensorboard": "TensorBoardLogger",
                    "get_everywhere": True, "main_only": ["start", "config", "log", "finish"],
                    "everywhere": ["start", "config", "log", "finish"]}
    assert other == {"trackers": ["everywhere"], "get_tensorboard": "NullTracker", "get_everywhere": True,
                     "main_only": [], "everywhere": ["start", "config", "finish"]}  # log: on the main process only
    assert tensorboard_scalars(tmp_path / "exp" / "version_0") == {"loss": [(0, 0.5)]}
