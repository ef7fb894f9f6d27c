"""BasePredictionWriter in real Trainer.predict runs: what is written, when, and with which arguments."""

from __future__ import annotations

import pytest
import torch

from stoker import BasePredictionWriter
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor, make_regression_data


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
    t, module = trainer(tmp_path, callbacks=[writer]), Predictor()
    out = t.predict(module, loaders(n=20)[0])
    assert [b[3:] for b in writer.batches] == [(0, 0), (1, 0), (2, 0)]
    assert [b[2] for b in writer.batches] == [8, 8, 4]
    assert writer.epochs == []
    assert all(b[0] is o for b, o in zip(writer.batches, out))
    # batch_indices: which samples of the (shuffled) dataset each batch held, in the batch's order
    indices = [b[1] for b in writer.batches]
    assert [len(i) for i in indices] == [8, 8, 4] and sorted(sum(indices, [])) == list(range(20))
    x = make_regression_data(20).tensors[0]
    with torch.no_grad():
        for prediction, batch_indices, *_ in writer.batches:
            torch.testing.assert_close(prediction, module.net(x[batch_indices]))


def test_epoch_interval_writes_everything_once(tmp_path):
    writer = Recorder("epoch")
    t = trainer(tmp_path, callbacks=[writer])
    out = t.predict(Predictor(), loaders()[0])
    assert writer.batches == [] and len(writer.epochs) == 1
    predictions, indices = writer.epochs[0]
    assert len(predictions) == 4 and all(p is o for p, o in zip(predictions, out))
    assert len(indices) == 1 and [len(i) for i in indices[0]] == [8] * 4  # one list per loader, as in Lightning
    assert sorted(sum(indices[0], [])) == list(range(32))
    t.predict(Predictor(), loaders()[0])
    assert len(writer.epochs) == 2 and len(writer.epochs[1][0]) == 4  # the second run starts afresh


def test_batch_and_epoch_with_several_loaders(tmp_path):
    writer = Recorder("batch_and_epoch")
    t = trainer(tmp_path, callbacks=[writer])
    train, val = loaders()
    out = t.predict(Predictor(), [train, val])
    assert [b[3:] for b in writer.batches] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1)]
    (predictions, indices), = writer.epochs
    assert [len(p) for p in predictions] == [4, 2]
    assert indices[1] == [list(range(8)), list(range(8, 16))]  # the validation loader is not shuffled
    assert [b[1] for b in writer.batches] == indices[0] + indices[1]  # the same lists at each batch's end
    torch.testing.assert_close(predictions[1][0], out[1][0], rtol=0, atol=0)


@pytest.mark.parametrize("interval, missing", [("batch", "write_on_batch_end"), ("epoch", "write_on_epoch_end")])
def test_an_undefined_writing_method_is_named(tmp_path, interval, missing):
    with pytest.raises(NotImplementedError, match=f"calls {missing} .* does not define it. Define {missing}"):
        trainer(tmp_path, callbacks=[BasePredictionWriter(interval)]).predict(Predictor(), loaders()[0])


def test_bad_interval():
    with pytest.raises(ValueError, match="write_interval='step'"):
        BasePredictionWriter("step")
    assert BasePredictionWriter().interval == "batch"


class Rows(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(make_regression_data(12))


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_indices_with_workers_and_none_without_a_batch_sampler(tmp_path, workers):
    writer = Recorder("batch_and_epoch")
    data = make_regression_data(12)
    loader = torch.utils.data.DataLoader(data, batch_size=5, num_workers=workers)
    trainer(tmp_path, callbacks=[writer], limit_predict_batches=2).predict(Predictor(), loader)
    # the workers read ahead, and the limit leaves the third batch out: indices still match batch by batch
    assert [b[1] for b in writer.batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert writer.epochs[0][1] == [[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]]
    stream = Recorder("batch")
    trainer(tmp_path, callbacks=[stream]).predict(Predictor(), torch.utils.data.DataLoader(Rows(), batch_size=5))
    assert [b[1] for b in stream.batches] == [None, None, None]


def test_each_process_records_its_own_share():
    """What a process of several records: its own batches (round-robin), the epoch's padding included."""
    from torch.utils.data import BatchSampler, SequentialSampler

    from stoker.accelerator.data.samplers import ShardedBatchSampler

    second = ShardedBatchSampler(BatchSampler(SequentialSampler(range(10)), 4, False), num_shards=2, shard=1)
    second.recorded = []
    handed_out = list(second)
    assert handed_out == [[4, 5, 6, 7], [0, 1, 2, 3]] and second.recorded == handed_out  # an added batch
    first = ShardedBatchSampler(BatchSampler(SequentialSampler(range(10)), 4, False), num_shards=2, shard=0)
    first.recorded = []
    assert list(first) == first.recorded == [[0, 1, 2, 3], [8, 9, 0, 1]]  # the short last batch made even
