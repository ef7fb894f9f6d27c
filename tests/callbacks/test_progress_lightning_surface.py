"""The progress bars' Lightning surface: the tqdm objects a run makes (factories to override, properties to read),
`TQDMProgressBar`'s refresh in batches with the shown values still read on time, `Tqdm`'s number format, printing
through the bar and ``v_num``."""

from __future__ import annotations

import io
import pickle
import threading

import pytest
import torch

from stoker.callbacks import ProgressBar, TQDMProgressBar
from stoker.callbacks import progress_tqdm
from tests.callbacks.fakes import FakeTrainer
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class _Counting(progress_tqdm.Tqdm):
    """Records every value its count takes, as a user's tqdm subclass might."""

    def __init__(self, *args, **kwargs):
        self.counts = []
        super().__init__(*args, **kwargs)
        self.counts = []  # what tqdm's own start-up set is not the run's

    @property
    def n(self):
        return self.__dict__.get("_count", 0)

    @n.setter
    def n(self, value):
        self.__dict__["_count"] = value
        if hasattr(self, "counts") and (not self.counts or self.counts[-1] != value):
            self.counts.append(value)


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr(progress_tqdm, "Tqdm", _Counting)


def _train_epoch(trainer_, bar, batches):
    bar.on_train_start(trainer_, trainer_.module)
    bar.on_train_epoch_start(trainer_, trainer_.module)
    for i in range(batches):
        bar.on_train_batch_end(trainer_, trainer_.module, {"loss": torch.tensor(0.5)}, None, i)


@pytest.mark.parametrize(("value", "shown"), [(2, "2"), (2.0, "2.000"), (0.25, "0.250"), (0.125, "0.125"),
                                              (3e-7, "3e-7"), ("0.5", "0.500"), ("123456", "123456"),
                                              ("n/a", "n/a"), (123456.0, "1.23e+5")])
def test_tqdm_shows_floats_and_numeric_text_with_a_steady_width(value, shown):
    assert progress_tqdm.Tqdm.format_num(value) == shown


def test_lightnings_module_path_is_where_the_bars_class_is_looked_up(tmp_path, monkeypatch):
    from stoker.callbacks.progress.tqdm_progress import Tqdm

    assert Tqdm is progress_tqdm.Tqdm
    monkeypatch.setattr("stoker.callbacks.progress.tqdm_progress.Tqdm", _Counting)
    bar = TQDMProgressBar(refresh_rate=2)
    fake = FakeTrainer(str(tmp_path), callbacks=[bar], num_training_batches=5)
    bar.setup(fake, fake.module, "fit")
    _train_epoch(fake, bar, 5)
    assert isinstance(bar.train_progress_bar, _Counting) and bar.train_progress_bar.counts == [0, 2, 4, 5]


def test_refresh_rate_is_batches_with_the_environments_floor(monkeypatch):
    monkeypatch.delenv("COLAB_GPU", raising=False)
    monkeypatch.delenv("TQDM_MINITERS", raising=False)
    assert TQDMProgressBar().refresh_rate == 1 and TQDMProgressBar(refresh_rate=7).refresh_rate == 7
    monkeypatch.setenv("TQDM_MINITERS", "4")
    assert TQDMProgressBar(refresh_rate=2).refresh_rate == 4 and TQDMProgressBar(refresh_rate=9).refresh_rate == 9
    assert TQDMProgressBar(refresh_rate=0).is_enabled is False  # not set up by a run yet
    assert TQDMProgressBar(refresh_rate=0).refresh_rate == 4  # the floor turns a bar given 0 on
    monkeypatch.setenv("TQDM_MINITERS", "often")
    with pytest.raises(ValueError, match="TQDM_MINITERS='often'"):
        TQDMProgressBar()
    monkeypatch.delenv("TQDM_MINITERS")
    monkeypatch.setenv("COLAB_GPU", "1")  # a notebook's output cannot keep up with a redraw per batch
    assert TQDMProgressBar().refresh_rate == 20 and TQDMProgressBar(refresh_rate=3).refresh_rate == 3
    with pytest.raises(ValueError, match="seconds=-1"):
        TQDMProgressBar(seconds=-1)


class _Watching(TQDMProgressBar):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.reads = 0

    def get_metrics(self, trainer_, module):
        self.reads += 1
        return super().get_metrics(trainer_, module)


@pytest.mark.parametrize(("seconds", "reads_during_epoch"), [(3600.0, 0), (0.0, 3)])
def test_count_is_redrawn_every_n_batches_while_values_are_read_on_time(tmp_path, counting, seconds,
                                                                         reads_during_epoch):
    bar = _Watching(refresh_rate=3, seconds=seconds)
    fake = FakeTrainer(str(tmp_path), callbacks=[bar], num_training_batches=7)
    bar.setup(fake, fake.module, "fit")
    _train_epoch(fake, bar, 7)
    assert bar.train_progress_bar.counts == [0, 3, 6, 7]  # every third batch and the last
    assert bar.reads == reads_during_epoch  # an hour between reads: none until the epoch ends
    bar.on_train_epoch_end(fake, fake.module)
    assert bar.reads == reads_during_epoch + 1 and "loss" in str(bar.train_progress_bar.postfix)


class _Custom(TQDMProgressBar):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.made = []

    def init_train_tqdm(self):
        bar = super().init_train_tqdm()
        bar.unit = "batch"
        self.made.append(bar)
        return bar

    def init_validation_tqdm(self):
        bar = super().init_validation_tqdm()
        bar.colour = "green"
        return bar

    def on_sanity_check_end(self, trainer_, module):
        self.sanity_total = self.val_progress_bar.total
        super().on_sanity_check_end(trainer_, module)


@pytest.mark.parametrize(("leave", "bars_made"), [(False, 1), (True, 4)])  # one when training starts, one per epoch
def test_a_subclass_factory_makes_the_bars_and_leave_decides_how_many(tmp_path, leave, bars_made):
    bar = _Custom(leave=leave)
    t = trainer(tmp_path, max_epochs=3, enable_progress_bar=True, callbacks=[bar], num_sanity_val_steps=1)
    t.fit(Regressor(), *loaders())
    assert len(bar.made) == bars_made and bar.train_progress_bar is bar.made[-1]
    assert bar.train_progress_bar.unit == "batch" and bar.val_progress_bar.colour == "green"
    assert (bar.train_progress_bar.n, bar.train_progress_bar.total) == (4, 4)
    assert (bar.val_progress_bar.n, bar.val_progress_bar.total) == (2, 2)
    assert bar.sanity_total == 1  # the sanity check's bar counts its own batches, not the whole loader


def test_evaluation_bars_stay_readable_after_their_run_and_the_bar_still_pickles(tmp_path):
    bar = ProgressBar()
    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True, callbacks=[bar])
    model = Regressor()
    train, val = loaders()
    t.fit(model, train, val)
    t.test(model, dataloaders=val)
    assert (bar.test_progress_bar.n, bar.test_progress_bar.total) == (2, 2)
    assert (bar.val_progress_bar.n, bar.val_progress_bar.total) == (2, 2)
    fake = FakeTrainer(str(tmp_path), callbacks=[bar], num_predict_batches=[3, 1])
    bar.setup(fake, fake.module, "predict")
    bar.on_predict_start(fake, fake.module)
    for i in range(4):
        bar.on_predict_batch_end(fake, fake.module, None, None, i)
    bar.on_predict_end(fake, fake.module)
    assert (bar.predict_progress_bar.n, bar.predict_progress_bar.total) == (4, 4)
    copy = pickle.loads(pickle.dumps(bar))
    with pytest.raises(RuntimeError, match="train_progress_bar is made when that bar starts"):
        copy.train_progress_bar
    copy.train_progress_bar = bar.train_progress_bar  # a subclass may set its own
    assert copy.train_progress_bar is bar.train_progress_bar


def test_a_run_off_a_terminal_starts_no_tqdm_thread(tmp_path):
    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True)
    t.fit(Regressor(), *loaders())
    assert isinstance(t.progress_bar_callback.train_progress_bar, progress_tqdm.Tqdm)
    monitors = [th for th in threading.enumerate() if getattr(th, "tqdm_cls", None) is progress_tqdm.Tqdm]
    assert monitors == []


def test_a_disabled_bar_draws_nothing_but_still_tells_its_totals(tmp_path, capsys):
    bar = TQDMProgressBar(refresh_rate=0)
    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True, callbacks=[bar])
    t.fit(Regressor(), *loaders())
    assert bar.is_disabled and capsys.readouterr().err == ""
    assert bar.train_progress_bar.total == 4 and bar.train_progress_bar.disable


def test_an_off_rank_bar_makes_disabled_bars(tmp_path, counting):
    bar = TQDMProgressBar()
    fake = FakeTrainer(str(tmp_path), callbacks=[bar], num_training_batches=3, is_global_zero=False)
    bar.setup(fake, fake.module, "fit")
    _train_epoch(fake, bar, 3)
    assert bar.train_progress_bar.disable and bar.train_progress_bar.total == 3
    assert bar.train_progress_bar.counts == [0]  # a disabled bar is not counted (nor read from the device)


class _Printing(Regressor):
    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.print("step", batch_idx, sep="=", flush=True)
        return super().training_step(batch, batch_idx)


def test_module_print_goes_through_the_bars_print(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(progress_tqdm.Tqdm, "write", classmethod(lambda cls, s, **kw: written.append((s, kw))))
    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True)
    t.fit(_Printing(), *loaders())
    assert written == [("step=0", {})]
    bar = t.progress_bar_callback
    bar.print("no bar open", "now")  # every bar of the run is closed: a plain print
    assert written == [("step=0", {})] and "no bar open now" in capsys.readouterr().out


def test_a_print_override_is_what_module_print_calls(tmp_path):
    lines = []

    class Collecting(ProgressBar):
        def print(self, *args, **kwargs):
            lines.append(args)

    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True, callbacks=[Collecting(file=io.StringIO())])
    t.fit(_Printing(), *loaders())
    assert lines == [("step", 0)]


class _Versioned:
    def __init__(self, version):
        self.version = version


@pytest.mark.parametrize(("versions", "v_num"), [([3], 3), (["run-2024-abcd"], "abcd"), ([1, 2], "1_2"),
                                                 ([5, 5], "5"), ([None], None), ([], None)])
def test_v_num_is_the_loggers_version(tmp_path, versions, v_num):
    bar = ProgressBar()
    fake = FakeTrainer(str(tmp_path), loggers=[_Versioned(v) for v in versions])
    fake.progress_bar_metrics = {"acc": 0.5}
    shown = bar.get_metrics(fake, fake.module)
    assert shown == ({"acc": 0.5} if v_num is None else {"v_num": v_num, "acc": 0.5})
    fake.progress_bar_metrics = {"v_num": 99}  # a value logged under the name wins
    assert bar.get_metrics(fake, fake.module)["v_num"] == 99


def test_a_real_run_with_a_logger_shows_v_num(tmp_path):
    out = io.StringIO()
    bar = ProgressBar(file=out)
    t = trainer(tmp_path, max_epochs=1, enable_progress_bar=True, callbacks=[bar], logger=True)
    model = Regressor()
    t.fit(model, *loaders())
    assert bar.get_metrics(t, model)["v_num"] == t.logger.version
    epoch_line = next(line for line in out.getvalue().splitlines() if line.startswith("Epoch 0"))
    assert f"v_num={t.logger.version}" in epoch_line
