"""validate / test that went well: with verbose=True their closing line follows their metrics on stdout, as fit's
ends its run; with verbose=False they print nothing, and their facts still go to run_summary.json."""

from __future__ import annotations

import json
import os

from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _summary(t) -> dict:
    with open(os.path.join(t.loggers[0].log_dir, "run_summary.json"), encoding="utf-8") as f:
        return json.load(f)


def test_verbose_validate_and_test_end_with_the_closing_line_after_their_metrics(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, logger="csv")
    module = Regressor()
    t.fit(module, *loaders())
    capsys.readouterr()
    log_dir = os.path.abspath(t.loggers[0].log_dir)
    for fn, metric in (("validate", "val/loss"), ("test", "test/loss")):
        getattr(t, fn)(module, loaders()[1], verbose=True)
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"{fn} metrics" and lines[1].split()[0] == metric
        assert lines[-2] == f"stoker: {fn} finished (2 batches)."  # the last word, after the table
        assert lines[-1] == f"  best checkpoint: {t.checkpoint_callback.best_model_path} | logs: {log_dir}"
        assert _summary(t)[fn]["status"] == "completed"


def test_quiet_validate_and_test_print_nothing_and_still_write_their_facts(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, logger="csv")
    module = Regressor()
    t.fit(module, *loaders())
    os.remove(os.path.join(t.loggers[0].log_dir, "run_summary.json"))
    capsys.readouterr()
    t.validate(module, loaders()[1], verbose=False)
    t.test(module, loaders()[1], verbose=False)
    assert capsys.readouterr().out == ""
    summary = _summary(t)
    assert summary["validate"]["why"] == summary["test"]["why"] == "finished (2 batches)"
