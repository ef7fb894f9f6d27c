"""``Trainer(profiler="simple" | "advanced" | "pytorch")``, as Lightning's: a time table per hook and stage at the
end of the run (and in a file), cProfile statistics, a torch.profiler Chrome trace in the run's folder."""

from __future__ import annotations

import json
import os

import pytest

from stoker import Trainer
from stoker.trainer.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _fit(tmp_path, profiler):
    t = trainer(tmp_path, max_epochs=2, profiler=profiler, enable_checkpointing=False, num_sanity_val_steps=0)
    t.fit(Regressor(), *loaders())
    return t


def test_simple_prints_and_writes_a_table_of_hooks_and_stages(tmp_path, capsys):
    t = _fit(tmp_path, "simple")
    assert isinstance(t.profiler, SimpleProfiler)
    out = capsys.readouterr().out
    assert "SimpleProfiler report for fit:" in out
    assert out.rstrip().splitlines()[-1].startswith("stoker: fit stopped")  # the closing line stays last
    path = tmp_path / "fit-profile-simple.txt"
    text = path.read_text()
    rows = {line.split("|")[0].strip(): line for line in text.splitlines()[2:]}
    assert int(rows["[Stage]train batch"].split("|")[1]) == 8  # 4 batches x 2 epochs
    assert int(rows["[Stage]train epoch"].split("|")[1]) == 2
    assert int(rows["[Stage]validation run"].split("|")[1]) == 2
    assert int(rows["[Callback]ModelSummary.on_fit_start"].split("|")[1]) == 1
    assert int(rows["[Run]fit"].split("|")[1]) == 1
    assert text.splitlines()[2].startswith("[Run]fit")  # longest total first: the whole run


def test_advanced_adds_cprofile_statistics(tmp_path, capsys):
    t = _fit(tmp_path, "advanced")
    assert isinstance(t.profiler, AdvancedProfiler)
    text = (tmp_path / "fit-profile-advanced.txt").read_text()
    assert "cProfile, by cumulative time:" in text and "function calls" in text and "Ordered by: cumulative time" in text


def test_pytorch_writes_a_chrome_trace_with_the_hooks_as_ranges(tmp_path, capsys):
    t = _fit(tmp_path, "pytorch")
    assert isinstance(t.profiler, PyTorchProfiler)
    with open(tmp_path / "fit-trace.json", encoding="utf-8") as f:
        trace = json.load(f)
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "[Stage]train batch" in names and "[Run]fit" in names and "aten::addmm" in names
    assert "torch.profiler, by CPU time:" in (tmp_path / "fit-profile-pytorch.txt").read_text()


def test_validate_is_profiled_on_its_own(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, profiler="simple", enable_checkpointing=False)
    module = Regressor()
    t.fit(module, loaders()[0])
    t.validate(module, loaders()[1])
    text = (tmp_path / "validate-profile-simple.txt").read_text()
    assert "[Run]validate" in text and "[Stage]validation run" in text and "[Run]fit" not in text


def test_bad_profilers_are_refused():
    with pytest.raises(ValueError, match=r"it can only be one of \['simple', 'advanced', 'pytorch'\]: "
                                         r"Trainer\(profiler='fancy'\) is not a profiler"):
        Trainer(profiler="fancy", logger=False)
    with pytest.raises(TypeError, match=r"Trainer\(profiler=3\) must be None"):
        Trainer(profiler=3, logger=False)


def test_no_profiler_no_files(tmp_path, capsys):
    _fit(tmp_path, None)
    assert not [name for name in os.listdir(tmp_path) if "profile" in name or "trace" in name]


# -- Lightning's profiler surface: stoker.profilers, PassThroughProfiler, dirpath / filename, describe


class _TimesItsOwnPart(Regressor):
    """A module that times a part of its training step under a name of its own, with whatever profiler the run has."""

    def training_step(self, batch, batch_idx):
        with self.trainer.profiler.profile("my part"):
            return super().training_step(batch, batch_idx)


def test_without_a_profiler_the_trainer_has_one_that_records_nothing(tmp_path, capsys):
    from stoker.profilers import PassThroughProfiler

    t = trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
    assert isinstance(t.profiler, PassThroughProfiler)
    t.fit(_TimesItsOwnPart(), *loaders())  # the module's own profile() block runs without a profiler asked for
    assert not t.profiler.durations and not t.profiler.written
    assert not [name for name in os.listdir(tmp_path) if "profile" in name]


def test_the_lightning_module_path_names_the_same_classes():
    import stoker.profilers as face
    from stoker.trainer import profilers

    for name in ("Profiler", "SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler", "PassThroughProfiler"):
        assert getattr(face, name) is getattr(profilers, name)
    assert isinstance(Trainer(profiler="Simple", logger=False).profiler, SimpleProfiler)  # any case


def test_dirpath_and_filename_name_the_report(tmp_path, capsys):
    target = tmp_path / "not" / "yet"
    profiler = SimpleProfiler(dirpath=target, filename="timings")
    t = trainer(tmp_path, max_epochs=1, profiler=profiler, enable_checkpointing=False)
    t.fit(_TimesItsOwnPart(), *loaders())
    assert "my part" in (target / "fit-timings.txt").read_text()  # the folder is made
    assert len(profiler.recorded_durations["my part"]) == 4  # Lightning's name for durations


def test_without_dirpath_the_report_goes_to_the_run_folder_which_becomes_dirpath(tmp_path, capsys):
    from stoker.loggers import CSVLogger

    profiler = SimpleProfiler(filename="timings")
    assert profiler.dirpath is None
    t = trainer(tmp_path, max_epochs=1, profiler=profiler, enable_checkpointing=False)
    t.fit(Regressor(), *loaders())
    assert profiler.dirpath == str(tmp_path) and (tmp_path / "fit-timings.txt").exists()
    # with a logger, the run's folder is the first logger's (Lightning's trainer.log_dir)
    logger = CSVLogger(tmp_path / "logs")
    t = trainer(tmp_path, max_epochs=1, profiler="simple", logger=logger, enable_checkpointing=False,
                log_every_n_steps=1)
    t.fit(Regressor(), *loaders())
    assert os.path.exists(os.path.join(logger.log_dir, "fit-profile-simple.txt"))
    assert not (tmp_path / "fit-profile-simple.txt").exists()


def test_describe_prints_and_writes_timings_of_your_own(tmp_path, capsys):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="mine")
    for _ in range(3):
        with profiler.profile("load"):
            pass
    assert len(profiler.recorded_durations["load"]) == 3
    profiler.describe()
    assert "load" in capsys.readouterr().out and "load" in (tmp_path / "mine.txt").read_text()
    assert profiler.summary().splitlines()[:2] == profiler.report().splitlines()[:2]  # Lightning's name for it


def test_advanced_profiles_each_action_of_your_own_and_can_dump_them(tmp_path, capsys):
    import pstats

    profiler = AdvancedProfiler(dirpath=tmp_path, dump_stats=True)
    with profiler.profile("outer: a/b"), profiler.profile("inner"):  # inner: part of the outer action's profile
        sorted(range(1000))
    assert set(profiler.profiled_actions) == {"outer: a/b"}
    profiler.describe()
    assert "cProfile of outer: a/b" in capsys.readouterr().out
    dumped = [name for name in os.listdir(tmp_path) if name.endswith(".prof")]
    assert dumped == ["outer__a_b.prof"]  # characters a file name cannot hold replaced
    assert pstats.Stats(str(tmp_path / dumped[0])).total_calls > 0


def test_start_and_stop_time_an_action_and_refuse_a_wrong_order():
    profiler = SimpleProfiler()
    with pytest.raises(ValueError, match=r"Profiler.stop\('load'\): no action 'load' is being timed"):
        profiler.stop("load")
    with pytest.raises(ValueError, match=r"^Attempting to stop recording an action \(load\) which was never "
                                         r"started\."):  # Lightning's sentence first
        profiler.stop("load")
    profiler.start("load")
    with pytest.raises(ValueError, match=r"Profiler.start\('load'\): that action is already being timed"):
        profiler.start("load")
    profiler.stop("load")
    assert len(profiler.recorded_durations["load"]) == 1
    from stoker.profilers import PassThroughProfiler

    nothing = PassThroughProfiler()
    nothing.start("load")
    nothing.stop("load")
    nothing.stop("never started")  # records nothing, so refuses nothing
    assert not nothing.recorded_durations


def test_pytorch_profiler_passes_torch_settings_and_steps_a_schedule(tmp_path, capsys):
    import torch

    traces = []
    profiler = PyTorchProfiler(filename="torch", sort_by_key="self_cpu_time_total",
                               table_kwargs={"max_name_column_width": 9},
                               schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
                               on_trace_ready=traces.append)
    _fit(tmp_path, profiler)  # 8 training batches: the schedule records batches 3 and 4 and hands them over once
    assert len(traces) == 1
    assert profiler.written == [str(tmp_path / "fit-torch.txt")]  # on_trace_ready took the trace: no Chrome file
    assert "torch.profiler, by self_cpu_time_total:" in (tmp_path / "fit-torch.txt").read_text()
    assert not (tmp_path / "fit-trace.json").exists()
    with pytest.raises(ValueError, match=r"table_kwargs=...\): \['row_limit', 'unknown'\] are not arguments"):
        PyTorchProfiler(table_kwargs={"row_limit": 3, "unknown": 1})


def test_pytorch_profiler_outside_a_run_and_its_copies(tmp_path, capsys):
    import copy
    import pickle

    import torch

    profiler = PyTorchProfiler(dirpath=tmp_path, filename="mine")
    with profiler.profile("my op"):  # the first action starts torch.profiler; describe() stops it
        torch.ones(3).sum()
    profiler.describe()
    names = {event.name for event in profiler.function_events}
    assert {"my op", "aten::sum"} <= names
    assert "torch.profiler, by CPU time:" in (tmp_path / "mine.txt").read_text()
    for twin in (copy.deepcopy(profiler), pickle.loads(pickle.dumps(profiler))):  # settings and times, no live tracer
        assert twin.function_events is None and twin.recorded_durations["my op"] == profiler.recorded_durations["my op"]


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_each_process_of_a_run_writes_its_own_report(tmp_path, capsys):
    from tests.helpers.models import make_loader, make_regression_data

    profiler = SimpleProfiler(dirpath=tmp_path / "profiles", filename="timings")
    t = Trainer(strategy="ddp_spawn", accelerator="cpu", devices=2, default_root_dir=tmp_path, logger=False,
                enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, max_steps=2,
                profiler=profiler)
    t.fit(Regressor(), make_loader(make_regression_data(n=16), batch_size=4))
    assert sorted(os.listdir(tmp_path / "profiles")) == ["fit-timings-0.txt", "fit-timings-1.txt"]
    assert "[Stage]train batch" in (tmp_path / "profiles" / "fit-timings-1.txt").read_text()


def test_simple_without_extended_shows_means_and_totals_only(tmp_path, capsys):
    short = SimpleProfiler(extended=False)
    with short.profile("load"):
        pass
    header = short.summary().splitlines()[0]
    assert [cell.strip() for cell in header.split("|")] == ["Action", "Mean (s)", "Total (s)"]
    full = SimpleProfiler()
    with full.profile("load"):
        pass
    row = full.summary().splitlines()[2]  # outside a run, the share is of the time since the profiler was made
    assert row.split("|")[0].strip() == "load" and 0 < float(row.split("|")[-1].strip(" %")) <= 100


def test_two_callbacks_of_one_class_are_timed_apart(tmp_path, capsys):
    from stoker.callbacks import EarlyStopping

    t = trainer(tmp_path, max_epochs=1, profiler="simple", enable_checkpointing=False,
                callbacks=[EarlyStopping("train/loss", patience=5), EarlyStopping("val/loss", patience=5)])
    t.fit(Regressor(), *loaders())
    actions = {line.split("|")[0].strip() for line in (tmp_path / "fit-profile-simple.txt").read_text().splitlines()}
    assert {"[Callback]EarlyStopping{'monitor': 'train/loss', 'mode': 'min'}.on_validation_end",
            "[Callback]EarlyStopping{'monitor': 'val/loss', 'mode': 'min'}.on_validation_end"} <= actions
