"""A profiler written the way Lightning documents it (a ``Profiler`` subclass with its own ``start``/``stop``/
``summary``/``teardown``) sees every action of a run; the run's report goes through the ``stoker.profiler`` logger
when that logger takes INFO records, else to standard output; ``profile()`` hands out the action's name."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from stoker.profilers import Profiler, SimpleProfiler
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class CountingProfiler(Profiler):
    """Counts how often each action starts and ends, and reports the counts; forgets them when a run ends."""

    def __init__(self, dirpath=None, filename=None) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.starts: Counter[str] = Counter()
        self.stops: Counter[str] = Counter()
        self.torn_down: list[tuple[str | None, dict[str, int]]] = []

    def start(self, action: str) -> None:
        self.starts[action] += 1

    def stop(self, action: str) -> None:
        self.stops[action] += 1

    def summary(self) -> str:
        return "".join(f"{action}: {count}\n" for action, count in sorted(self.stops.items()))

    def teardown(self, stage: str | None) -> None:
        self.torn_down.append((stage, dict(self.stops)))
        self.starts.clear()
        self.stops.clear()


def test_a_profiler_of_your_own_gets_every_hook_stage_and_run_through_start_and_stop(tmp_path, capsys):
    profiler = CountingProfiler(dirpath=tmp_path, filename="counts")
    seen: dict[str, tuple[int, int]] = {}

    class Peeks(Regressor):
        def on_train_end(self) -> None:  # what the profiler saw, before the run's end resets it
            seen.update({a: (profiler.starts[a], profiler.stops[a]) for a in profiler.starts})

    t = trainer(tmp_path, max_epochs=2, profiler=profiler, enable_checkpointing=False)
    t.fit(Peeks(), *loaders())
    assert seen["[Stage]train batch"] == (8, 8) and seen["[Stage]train epoch"] == (2, 2)  # 4 batches x 2 epochs
    assert seen["[Module]Peeks.on_train_end"] == (1, 0) and seen["[Run]fit"] == (1, 0)  # both still running
    assert seen["[Callback]ModelSummary.on_fit_start"] == (1, 1)
    report = (tmp_path / "fit-counts.txt").read_text()
    assert "[Run]fit: 1\n" in report and "[Stage]train batch: 8\n" in report  # its own summary is the report
    assert "[Run]fit: 1" in capsys.readouterr().out
    counted = {line.rsplit(": ", 1)[0]: int(line.rsplit(": ", 1)[1]) for line in report.splitlines()}
    assert profiler.torn_down == [("fit", counted)]  # its teardown ran once, after the report
    assert not profiler.stops


def test_a_hook_that_raises_still_ends_its_action_and_the_run_tears_the_profiler_down(tmp_path):
    profiler = CountingProfiler()

    class Fails(Regressor):
        def on_train_start(self) -> None:
            raise RuntimeError("stop here")

    t = trainer(tmp_path, max_epochs=1, profiler=profiler, enable_checkpointing=False)
    with pytest.raises(RuntimeError, match="stop here"):
        t.fit(Fails(), *loaders())
    [(stage, stopped)] = profiler.torn_down
    assert stage == "fit" and stopped["[Module]Fails.on_train_start"] == 1 and stopped["[Run]fit"] == 1


def test_describe_shows_your_summary_then_tears_down(capsys):
    profiler = CountingProfiler()
    with profiler.profile("load"):
        pass
    profiler.describe()
    assert "CountingProfiler report:\nload: 1\n" in capsys.readouterr().out
    assert profiler.torn_down == [(None, {"load": 1})] and not profiler.stops


def test_an_empty_summary_writes_and_shows_nothing(tmp_path, capsys):
    class Quiet(CountingProfiler):
        def summary(self) -> str:
            return ""

    profiler = Quiet(filename="quiet")
    trainer(tmp_path, max_epochs=1, profiler=profiler, enable_checkpointing=False).fit(Regressor(), *loaders())
    assert not profiler.written and not (tmp_path / "fit-quiet.txt").exists()
    assert "Quiet report" not in capsys.readouterr().out and profiler.torn_down[0][0] == "fit"


def test_the_report_goes_to_the_profiler_logger_when_it_takes_info(tmp_path, capsys, caplog):
    t = trainer(tmp_path, max_epochs=1, profiler="simple", enable_checkpointing=False)
    module = Regressor()
    with caplog.at_level(logging.INFO, logger="stoker.profiler"):
        t.fit(module, *loaders())
        t.validate(module, loaders()[1])
    titles = [r.getMessage().splitlines()[0] for r in caplog.records if r.name == "stoker.profiler"]
    assert titles == ["FIT Profiler Report (SimpleProfiler):", "VALIDATE Profiler Report (SimpleProfiler):"]
    assert "report for fit" not in capsys.readouterr().out  # logged, so not printed as well
    assert (tmp_path / "fit-profile-simple.txt").exists()  # the file is written either way
    caplog.clear()
    t.fit(module, *loaders())  # the logger back at its default level: printed
    assert not caplog.records and "SimpleProfiler report for fit:" in capsys.readouterr().out


def test_profile_hands_out_the_action_name_and_start_time_is_what_shares_are_of():
    profiler = SimpleProfiler()
    with profiler.profile("load") as name:
        assert name == "load"
    profiler.durations["load"] = [1.0]
    profiler.start_time -= 1000.0  # the profiler "made" long ago: load is a small share of the time since
    share = float(profiler.summary().splitlines()[2].split("|")[-1].strip(" %"))
    assert 0 < share < 1


def test_pytorch_profiler_groups_its_operator_table_by_input_shapes(tmp_path, capsys):
    import torch

    from stoker.profilers import PyTorchProfiler

    profiler = PyTorchProfiler(dirpath=tmp_path, filename="shapes", group_by_input_shapes=True, row_limit=-1)
    assert profiler.record_shapes  # the shapes a grouping needs are recorded
    with profiler.profile("two sizes"):
        torch.ones(3).sum()
        torch.ones(2, 5).sum()
    profiler.describe()
    text = (tmp_path / "shapes.txt").read_text()
    sums = [line for line in text.splitlines() if line.lstrip().startswith("aten::sum ")]
    assert len(sums) == 2 and "[[3], []]" in text and "[[2, 5], []]" in text  # one row per input shape


def test_pytorch_profiler_takes_torch_activities_and_refuses_unknown_arguments_at_once(tmp_path, capsys):
    from torch.profiler import ProfilerActivity

    from stoker.profilers import PyTorchProfiler

    profiler = PyTorchProfiler(dirpath=tmp_path, filename="cpu", activities=[ProfilerActivity.CPU])
    trainer(tmp_path, max_epochs=1, profiler=profiler, enable_checkpointing=False).fit(Regressor(), *loaders())
    assert "torch.profiler, by CPU time:" in (tmp_path / "fit-cpu.txt").read_text()
    with pytest.raises(TypeError, match=r"\['emit_nvtx'\] are not arguments of torch.profiler.profile"):
        PyTorchProfiler(emit_nvtx=True)
