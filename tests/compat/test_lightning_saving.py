"""``stoker.core.saving`` (Lightning's ``core.saving`` path): a logger's ``hparams.yaml`` read and written."""

from __future__ import annotations

import argparse
from enum import Enum
from pathlib import Path

import numpy as np
import pytest
import torch

from stoker.core.saving import load_hparams_from_yaml, save_hparams_to_yaml
from stoker.loggers import CSVLogger


def test_reads_what_a_logger_wrote_and_writes_what_it_reads(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1, "layers": [2, 3], "name": "run"})
    logger.save()
    path = tmp_path / "lightning_logs" if (tmp_path / "lightning_logs").exists() else tmp_path
    files = list(path.rglob("hparams.yaml"))
    assert len(files) == 1
    assert load_hparams_from_yaml(files[0]) == {"lr": 0.1, "layers": [2, 3], "name": "run"}
    copy = tmp_path / "copy.yaml"
    save_hparams_to_yaml(copy, argparse.Namespace(lr=0.2, tuple_value=(1, 2)))
    assert load_hparams_from_yaml(copy) == {"lr": 0.2, "tuple_value": [1, 2]}


def test_missing_file_warns_and_gives_nothing_and_bad_input_is_refused(tmp_path):
    with pytest.warns(RuntimeWarning, match="No hyperparameter file"):
        assert load_hparams_from_yaml(tmp_path / "absent.yaml") == {}
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="not a mapping"):
        load_hparams_from_yaml(tmp_path / "list.yaml")
    with pytest.raises(TypeError, match="mapping or a Namespace"):
        save_hparams_to_yaml(tmp_path / "x.yaml", 3)


class Mode(str, Enum):
    FAST = "fast-mode"


def test_entries_yaml_cannot_read_back_are_left_out_with_a_warning(tmp_path):
    path = tmp_path / "h.yaml"
    hparams = {"dtype": torch.float32, "nested": {"fn": len}, "lr": 0.1, "root": Path("/data"), "mode": Mode.FAST,
               "scale": np.float64(2.5)}
    with pytest.warns(UserWarning) as caught:
        save_hparams_to_yaml(path, hparams)
    assert [str(w.message).split(":")[0] for w in caught] == ["Skipping 'dtype' parameter",
                                                              "Skipping 'nested' parameter"]
    # a path is its text, an enum member its name (Lightning's form), a numpy scalar its number
    assert load_hparams_from_yaml(path) == {"lr": 0.1, "root": "/data", "mode": "FAST", "scale": 2.5}


def test_legacy_meta_tags_csv_reads_back_what_was_saved(tmp_path):
    from stoker.core.saving import load_hparams_from_tags_csv, save_hparams_to_tags_csv

    hparams = {"batch_size": 32, "learning_rate": 0.008, "optimizer_name": "adam", "layers": [2, 3],
               "flag": True, "note": "a, quoted \"text\""}
    path = tmp_path / "meta_tags.csv"
    save_hparams_to_tags_csv(path, argparse.Namespace(**hparams))
    assert path.read_text().splitlines()[:2] == ["key,value", "batch_size,32"]
    assert load_hparams_from_tags_csv(path) == hparams
    (tmp_path / "code.csv").write_text("key,value\nx,__import__('os').getcwd()\n")
    assert load_hparams_from_tags_csv(tmp_path / "code.csv") == {"x": "__import__('os').getcwd()"}  # text, not run
    with pytest.warns(RuntimeWarning, match="No hyperparameter file"):
        assert load_hparams_from_tags_csv(tmp_path / "missing.csv") == {}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_hparams_to_tags_csv(tmp_path / "no" / "meta_tags.csv", hparams)
    with pytest.raises(TypeError, match="save_hparams_to_tags_csv needs a mapping or a Namespace, got int"):
        save_hparams_to_tags_csv(tmp_path / "bad.csv", 3)
