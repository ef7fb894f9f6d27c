"""SpikeDetection: the spike rule on its own, and in fits whose losses are scripted (a jump, NaN, +/- infinity)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from stoker import TrainingModule
from stoker.callbacks import SpikeDetection, TrainingSpikeException
from tests.callbacks.modules import trainer


class _ScriptedLoss(TrainingModule):
    """Its training loss is ``losses[batch_idx]`` (through a weight fixed at one, so that it has gradients)."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.losses = losses

    def training_step(self, batch, batch_idx):
        with torch.no_grad():
            self.weight.fill_(1.0)
        return self.weight[0] * self.losses[batch_idx]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def _fit(tmp_path, losses, **options):
    detector = SpikeDetection(exclude_batches_path=tmp_path / "skips", **options)
    loader = torch.utils.data.DataLoader(list(range(len(losses))), batch_size=1)
    # on_nonfinite_loss="warn": the Trainer's own non-finite check would stop these fits (after the callback's turn)
    trainer(tmp_path, max_epochs=1, callbacks=[detector], enable_checkpointing=False,
            on_nonfinite_loss="warn").fit(_ScriptedLoss(losses), loader)
    return detector


def test_a_jump_stops_the_fit_and_lists_it_and_the_batch_before(tmp_path):
    with pytest.raises(TrainingSpikeException, match="spike at batch 4") as caught:
        _fit(tmp_path, [1.0, 0.5, 0.33, 0.25, 3.0, 0.2])
    assert caught.value.batch_idx == 4
    assert json.loads((tmp_path / "skips" / "skip_batches.json").read_text()) == [3, 4]


@pytest.mark.parametrize(("bad", "finite_only", "stops"), [
    (math.nan, True, True), (math.inf, True, True), (-math.inf, True, True),
    (math.nan, False, False), (math.inf, False, True), (-math.inf, False, False),  # -inf: lower, an improvement
])
def test_non_finite_losses(tmp_path, bad, finite_only, stops):
    losses = [1.0, 0.5, 0.33, 0.25, bad, 0.2, 0.19]
    if stops:
        with pytest.raises(TrainingSpikeException):
            _fit(tmp_path, losses, finite_only=finite_only)
    else:
        detector = _fit(tmp_path, losses, finite_only=finite_only)
        assert all(math.isfinite(v) for v in detector.recent)  # a non-finite loss stays out of the mean
        assert detector.last_value == pytest.approx(0.19) and not (tmp_path / "skips").exists()


def test_the_rule_mode_tolerances_window_and_warmup(tmp_path):
    lenient = SpikeDetection(window=2, warmup=0, rtol=None, atol=10.0)
    assert not any(lenient.is_spike(v) for v in (1.0, 2.0, 5.0))  # never 10 away from the mean of the last two
    assert lenient.is_spike(20.0) and list(lenient.recent) == [2.0, 5.0]
    rising = SpikeDetection(mode="max", warmup=0)
    assert not any(rising.is_spike(v) for v in (1.0, 2.0, 3.0)) and rising.is_spike(-10.0)
    # warmup: the first batches only feed the mean, even a jump
    _fit(tmp_path, [1.0, 50.0, 40.0], warmup=3)


def test_state_survives_a_resume_round_trip():
    detector = SpikeDetection(window=3, warmup=0)
    for value in (1.0, 0.8, 0.7, 0.6):
        detector.is_spike(value)
    again = SpikeDetection(window=3, warmup=0)
    again.load_state_dict(detector.state_dict())
    assert list(again.recent) == [0.8, 0.7, 0.6] and again.last_value == 0.6
    assert again.is_spike(5.0) and detector.is_spike(5.0)


@pytest.mark.parametrize(("options", "error"), [({"mode": "up"}, ValueError), ({"window": 0}, ValueError),
                                                ({"warmup": -1}, ValueError), ({"rtol": "2"}, TypeError)])
def test_bad_settings_are_refused(options, error):
    with pytest.raises(error, match=rf"SpikeDetection\({next(iter(options))}="):
        SpikeDetection(**options)


class _OneRankSpikes(_ScriptedLoss):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_rank == 1 and batch_idx == 4:
            return self.weight[0] * 30.0
        return super().training_step(batch, batch_idx)


class _NotesTheStop(SpikeDetection):
    """Writes down where each process was stopped (a spawned process's exception would not come back whole)."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        try:
            super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)
        except TrainingSpikeException as stop:
            (self.exclude_batches_path / f"stopped-{trainer.global_rank}").write_text(str(stop.batch_idx))
            trainer.should_stop = True


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_spike_in_one_process_stops_every_process(tmp_path):
    from stoker import Trainer

    detector = _NotesTheStop(exclude_batches_path=tmp_path)
    t = Trainer(strategy="ddp_spawn", accelerator="cpu", devices=2, default_root_dir=tmp_path, logger=False,
                enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, max_epochs=1,
                callbacks=[detector])
    t.fit(_OneRankSpikes([1.0, 0.5, 0.33, 0.25, 0.2, 0.19, 0.18, 0.17]),
          torch.utils.data.DataLoader(list(range(16)), batch_size=1))
    assert (tmp_path / "stopped-0").read_text() == (tmp_path / "stopped-1").read_text() == "4"
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [3, 4]  # written once, by global zero


def test_the_exception_reads_the_same_after_crossing_processes():
    # ddp_spawn pickles a worker's exception to raise it in the parent: its message must not be built twice
    import pickle

    again = pickle.loads(pickle.dumps(TrainingSpikeException(4)))
    assert type(again) is TrainingSpikeException and again.batch_idx == 4
    assert str(again) == str(TrainingSpikeException(4)) and str(again).count("spike at batch") == 1
