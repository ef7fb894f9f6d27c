"""``PossibleUserWarning`` (Lightning's ``utilities.warnings``): the category of stoker's warnings about settings that may
be intended, so that a renamed script's ``filterwarnings(..., category=PossibleUserWarning)`` silences the same ones."""

from __future__ import annotations

import warnings

from torch.utils.data import DataLoader

from stoker.utilities.warnings import PossibleUserWarning
from tests.helpers.models import Regressor, make_regression_data
from tests.helpers.trainers import quiet_trainer


def test_the_warnings_about_intended_settings_are_possible_user_warnings(tmp_path, monkeypatch):
    import stoker.trainer.workers as workers

    monkeypatch.setattr(workers, "suggested_workers", lambda processes: 2)  # as on a machine with CPUs to spare
    from stoker.loggers import CSVLogger

    train = DataLoader(list(make_regression_data(16)), batch_size=8)  # a list, not a TensorDataset: not "in memory"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(max_epochs=1, default_root_dir=str(tmp_path), logger=CSVLogger(str(tmp_path))).fit(
            Regressor(), train)
    kinds = {w.category for w in caught if any(text in str(w.message) for text in (
        "does not have many workers", "smaller than the logging interval", "but have no `val_dataloader`"))}
    assert kinds == {PossibleUserWarning}
    messages = [str(w.message) for w in caught if w.category is PossibleUserWarning]
    assert len(messages) == 3, messages
    assert issubclass(PossibleUserWarning, UserWarning)

    with warnings.catch_warnings(record=True) as caught:  # a Lightning user's filter silences exactly those
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
        quiet_trainer(max_epochs=1, default_root_dir=str(tmp_path), logger=CSVLogger(str(tmp_path))).fit(
            Regressor(), train)
    assert not [w for w in caught if w.category is PossibleUserWarning]


def test_possible_user_warnings_off_in_the_environment_silences_them():
    from stoker.user_frame import silence_possible_user_warnings

    for value, silenced in (("0", True), ("off", True), ("OFF ", True), ("1", False), ("", False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert silence_possible_user_warnings({"POSSIBLE_USER_WARNINGS": value}) is silenced
            warnings.warn("may be intended", PossibleUserWarning)
            warnings.warn("a plain UserWarning stays", UserWarning)
        assert [str(w.message) for w in caught] == ["a plain UserWarning stays"] * silenced + (
            [] if silenced else ["may be intended", "a plain UserWarning stays"])


# -- Lightning's words inside stoker's messages, so that filters and log handlers written for Lightning match -------
def test_lightnings_sentences_appear_in_the_matching_messages(tmp_path, caplog):
    import logging
    from datetime import timedelta

    import pytest
    import torch
    from torch import nn

    from stoker import TrainingModule
    from stoker.callbacks import BaseFinetuning, Timer
    from stoker.loggers import CSVLogger

    layer = nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="The provided params to be frozen already exist"):
        BaseFinetuning.unfreeze_and_add_param_group(layer, optimizer=torch.optim.SGD(layer.parameters(), lr=0.1))

    class WithEncoder(TrainingModule):
        def __init__(self, encoder: nn.Module) -> None:
            super().__init__()
            self.save_hyperparameters()

    with pytest.warns(UserWarning, match="is an instance of `nn.Module` and is already saved"):
        WithEncoder(nn.Linear(1, 1))

    (tmp_path / "exp" / "version_0").mkdir(parents=True)
    (tmp_path / "exp" / "version_0" / "metrics.csv").write_text("step,a\n0,1\n")
    with pytest.warns(UserWarning, match="Experiment logs directory .* exists and is not empty"):
        CSVLogger(str(tmp_path), name="exp", version=0).log_metrics({"a": 2.0}, step=1)
    assert (tmp_path / "exp" / "version_0" / "metrics.csv").read_text().startswith("step,a\n0,1\n")  # kept

    timer = Timer(duration=timedelta(0), interval="step")
    with caplog.at_level(logging.INFO, logger="stoker"):
        quiet_trainer(max_epochs=2, callbacks=[timer], default_root_dir=str(tmp_path / "run")).fit(
            Regressor(), DataLoader(make_regression_data(16), batch_size=8))
    assert "Time limit reached." in caplog.text and "Signaling Trainer to stop." in caplog.text
