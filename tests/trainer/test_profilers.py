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
    t = trainer(tmp_path, max_epochs=2, profiler=profiler, enable_checkpointing=False)
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
    with pytest.raises(ValueError, match=r"Trainer\(profiler='fancy'\) is not a profiler. Expected one of"):
        Trainer(profiler="fancy", logger=False)
    with pytest.raises(TypeError, match=r"Trainer\(profiler=3\) must be None"):
        Trainer(profiler=3, logger=False)


def test_no_profiler_no_files(tmp_path, capsys):
    _fit(tmp_path, None)
    assert not [name for name in os.listdir(tmp_path) if "profile" in name or "trace" in name]
