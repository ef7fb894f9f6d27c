"""BasePredictionWriter in real Trainer.predict runs: what is written, when, and with which arguments."""

from __future__ import annotations

import pytest
import torch

from stoker import BasePredictionWriter
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class Predictor(Regressor):
    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.net(batch[0]) + dataloader_idx


class Recorder(BasePredictionWriter):
    def __init__(self, write_interval: str) -> None:
        super().__init__(write_interval)
        self.batches: list[tuple] = []
        self.epochs: list[tuple] = []

    def write_on_batch_end(self, trainer, module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((prediction, batch_indices, len(batch[0]), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
        self.epochs.append((predictions, batch_indices))


def test_batch_interval_writes_each_prediction_as_predict_returns_it(tmp_path):
    writer = Recorder("batch")
    t = trainer(tmp_path, callbacks=[writer])
    out = t.predict(Predictor(), loaders(n=20)[0])
    assert [b[3:] for b in writer.batches] == [(0, 0), (1, 0), (2, 0)]
    assert [b[2] for b in writer.batches] == [8, 8, 4]
    assert all(b[1] is None for b in writer.batches) and writer.epochs == []
    assert all(b[0] is o for b, o in zip(writer.batches, out))


def test_epoch_interval_writes_everything_once(tmp_path):
    writer = Recorder("epoch")
    t = trainer(tmp_path, callbacks=[writer])
    out = t.predict(Predictor(), loaders()[0])
    assert writer.batches == [] and len(writer.epochs) == 1
    predictions, indices = writer.epochs[0]
    assert len(predictions) == 4 and all(p is o for p, o in zip(predictions, out))
    assert indices == [[None] * 4]  # one list per loader, as in Lightning
    t.predict(Predictor(), loaders()[0])
    assert len(writer.epochs) == 2 and len(writer.epochs[1][0]) == 4  # the second run starts afresh


def test_batch_and_epoch_with_several_loaders(tmp_path):
    writer = Recorder("batch_and_epoch")
    t = trainer(tmp_path, callbacks=[writer])
    train, val = loaders()
    out = t.predict(Predictor(), [train, val])
    assert [b[3:] for b in writer.batches] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1)]
    (predictions, indices), = writer.epochs
    assert [len(p) for p in predictions] == [4, 2] and indices == [[None] * 4, [None] * 2]
    torch.testing.assert_close(predictions[1][0], out[1][0], rtol=0, atol=0)


@pytest.mark.parametrize("interval, missing", [("batch", "write_on_batch_end"), ("epoch", "write_on_epoch_end")])
def test_an_undefined_writing_method_is_named(tmp_path, interval, missing):
    with pytest.raises(NotImplementedError, match=f"calls {missing} .* does not define it. Define {missing}"):
        trainer(tmp_path, callbacks=[BasePredictionWriter(interval)]).predict(Predictor(), loaders()[0])


def test_bad_interval():
    with pytest.raises(ValueError, match="write_interval='step'"):
        BasePredictionWriter("step")
    assert BasePredictionWriter().interval == "batch"
