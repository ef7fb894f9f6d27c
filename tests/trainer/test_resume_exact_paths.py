"""A fit resumed from any of its checkpoints ends as the fit never interrupted: the same weights, optimizer and
scheduler states, epoch means and batches. Each case here resumed inexactly once: an epoch-end checkpoint carried
the ended epoch's sums into the next epoch's means; one saved by the epoch-end validation skipped that epoch's
``on_train_epoch_end``; a stream (an ``IterableDataset``) resumed at an epoch's start, on its last batch or under
``limit_train_batches`` from the position its inner loader still held; a ``CombinedLoader`` resumed mid-epoch read
its loaders again from their start, or from one batch ahead of the checkpoint; a fit that reloads its train loader
(``reload_dataloaders_every_n_epochs``) resumed with the loader its hook gave at epoch 0."""

from __future__ import annotations

import os
import warnings
import zlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import ModelCheckpoint, TrainingModule
from stoker.trainer import CombinedLoader
from tests.helpers.trainers import quiet_trainer


def _data(n: int = 24) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


class Stream(IterableDataset):
    """The same items every pass, without ``__len__``."""

    def __iter__(self) -> Any:
        data = _data()
        return (data[i] for i in range(len(data)))


class Net(TrainingModule):
    """Dropout (so the global RNG matters), an epoch mean, and the batches it trained on (as CRCs)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        self.seen: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen.append(zlib.crc32(x.numpy().tobytes()))
        loss = F.mse_loss(self.net(x), y)
        self.log("loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val", F.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class Combined(Net):
    """Trains on every part of a combined batch (a part is None once its loader is done, in ``max_size``)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        parts = [part for part in batch.values() if part is not None]
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        return super().training_step((x, y), batch_idx)


class EpochScheduled(Net):
    """Manual optimization whose scheduler steps in ``on_train_epoch_end``."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        opt.step()

    def on_train_epoch_end(self) -> None:
        self.lr_schedulers().step()

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=0.01)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


def fit(root: str, module_cls: type, loader: Any, ckpt: dict, ckpt_path: str | None = None, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    module = module_cls()
    kwargs.setdefault("max_epochs", 3)
    trainer = quiet_trainer(default_root_dir=root, enable_checkpointing=True, **kwargs,
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}",
                                                       save_top_k=-1, **ckpt)])
    trainer.fit(module, loader, DataLoader(_data(8), batch_size=4), ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    return trainer, module


def assert_same_end(whole: Any, resumed: Any, saved_at: int) -> None:
    (t1, m1), (t2, m2) = whole, resumed
    assert t2.global_step == t1.global_step
    assert m2.seen == m1.seen[len(m1.seen) - len(m2.seen):] and len(m1.seen) - len(m2.seen) == saved_at
    for a, b in zip(m1.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(t1.optimizers, t2.optimizers):
        assert a.state_dict()["param_groups"] == b.state_dict()["param_groups"]
    assert float(t2.callback_metrics["loss"]) == float(t1.callback_metrics["loss"])  # the last epoch's mean


@pytest.mark.parametrize("module_cls, ckpt, step", [
    (Net, {"every_n_epochs": 1}, 12),  # saved in on_train_epoch_end, before the epoch's sums were cleared
    (EpochScheduled, {"monitor": "val", "save_on_train_epoch_end": False}, 6),  # saved before on_train_epoch_end
], ids=["epoch-end-hooks", "epoch-end-validation"])
def test_a_fit_resumed_from_an_epoch_end_checkpoint_ends_as_the_uninterrupted_one(tmp_path, module_cls, ckpt, step):
    loader = DataLoader(_data(), batch_size=4, shuffle=True)  # 6 batches an epoch
    whole = fit(str(tmp_path / "whole"), module_cls, loader, ckpt)
    resumed = fit(str(tmp_path / "resumed"), module_cls, loader, ckpt,
                  ckpt_path=str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"))
    assert_same_end(whole, resumed, saved_at=step)


@pytest.mark.parametrize("every, limit, step", [
    (6, None, 6),  # saved on the last batch of an epoch of unknown length: it resumed into an empty epoch
    (6, None, 12),
    (2, 4, 2),  # saved mid-epoch under a batch limit: the limit counted again from the resumed batch
    (2, 4, 4),  # saved at a limited epoch's end: the next epoch fast-forwarded to where the limit had cut
], ids=["last-batch", "last-batch-2", "limited-mid-epoch", "limited-epoch-end"])
def test_a_fit_on_a_stream_resumes_exactly(tmp_path, every, limit, step):
    loader = DataLoader(Stream(), batch_size=4)  # 6 batches a pass
    whole = fit(str(tmp_path / "whole"), Net, loader, {"every_n_train_steps": every}, limit_train_batches=limit)
    resumed = fit(str(tmp_path / "resumed"), Net, loader, {"every_n_train_steps": every},
                  ckpt_path=str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"), limit_train_batches=limit)
    assert_same_end(whole, resumed, saved_at=step)


def test_a_stream_resumed_at_an_epoch_start_draws_the_global_rng_as_the_uninterrupted_fit(tmp_path):
    """The inner loader's fast-forward over the ended epoch drew worker seeds from the global RNG: dropout moved."""
    loader = DataLoader(Stream(), batch_size=4)
    whole = fit(str(tmp_path / "whole"), Net, loader, {"every_n_epochs": 1})
    resumed = fit(str(tmp_path / "resumed"), Net, loader, {"every_n_epochs": 1},
                  ckpt_path=str(tmp_path / "whole" / "ck" / "step=6.ckpt"))
    assert_same_end(whole, resumed, saved_at=6)


@pytest.mark.parametrize("mode, limit, step", [
    ("max_size_cycle", None, 8),  # 10 batches an epoch; the shorter loader (6) has started again
    ("min_size", None, 10),  # 6 batches an epoch; the longer loader continues its own epoch in the second
    ("max_size", 0.5, 4),  # 5 batches an epoch, each loader cut at half
])
def test_a_fit_on_a_combined_loader_resumes_mid_epoch_exactly(tmp_path, mode, limit, step):
    def loaders() -> CombinedLoader:
        return CombinedLoader({"a": DataLoader(_data(40), batch_size=4, shuffle=True),
                               "b": DataLoader(_data(24), batch_size=4, shuffle=True)}, mode)

    whole = fit(str(tmp_path / "whole"), Combined, loaders(), {"every_n_train_steps": 2}, limit_train_batches=limit)
    resumed = fit(str(tmp_path / "resumed"), Combined, loaders(), {"every_n_train_steps": 2},
                  ckpt_path=str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"), limit_train_batches=limit)
    assert_same_end(whole, resumed, saved_at=step)


class Growing(Net):
    """Its train loader grows by a batch each epoch it is asked for (a hook reading ``current_epoch``)."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_data(24 + 4 * self.trainer.current_epoch), batch_size=4, shuffle=True)


@pytest.mark.parametrize("every_n, step", [
    (1, 9),  # in epoch 1 (7 batches), whose loader the hook gave at epoch 1
    (2, 19),  # batch 7 of epoch 2 (8 batches): past the end of epoch 0's loader, which lost the position
])
def test_a_fit_that_reloads_its_train_loader_resumes_with_the_loader_it_was_reading(tmp_path, every_n, step):
    kwargs = {"reload_dataloaders_every_n_epochs": every_n, "max_epochs": 3}
    whole = fit(str(tmp_path / "whole"), Growing, None, {"every_n_train_steps": 1}, **kwargs)
    resumed = fit(str(tmp_path / "resumed"), Growing, None, {"every_n_train_steps": 1},
                  ckpt_path=str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"), **kwargs)
    assert_same_end(whole, resumed, saved_at=step)



class Rows(Combined):
    """Also each sample it trained on, per loader, in order (as CRCs)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.rows = getattr(self, "rows", {"a": [], "b": []})
        for key, part in batch.items():
            self.rows[key] += [zlib.crc32(row.numpy().tobytes()) for row in part[0]]
        return super().training_step(batch, batch_idx)


def combined(batch_size: int) -> CombinedLoader:
    return CombinedLoader({"a": DataLoader(_data(40), batch_size=batch_size, shuffle=True),
                           "b": DataLoader(_data(24), batch_size=batch_size, shuffle=True)}, "max_size_cycle")


def test_a_combined_loader_resumed_mid_epoch_with_other_batch_sizes_continues_after_the_samples_taken(tmp_path):
    """Batches of 8 instead of 4 (as on half the processes with the same per-process batch): every pass holds as many
    samples as before, so 2 steps of 8 cover the 4 steps of 4 done; the resumed fit used to drop 4."""
    _, whole = fit(str(tmp_path / "whole"), Rows, combined(4), {"every_n_train_steps": 2}, max_epochs=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Resuming in the middle")
        trainer, resumed = fit(str(tmp_path / "resumed"), Rows, combined(8), {"every_n_train_steps": 2},
                               ckpt_path=str(tmp_path / "whole" / "ck" / "step=4.ckpt"), max_epochs=1)
    assert trainer.global_step == 4 + 3  # an epoch is 5 batches of 8: 2 of them were done
    # the samples the 4 steps of 4 had not taken, in the same order (the shorter loader started again at its end)
    assert resumed.rows == {key: rows[16:] for key, rows in whole.rows.items()}


def test_a_combined_loader_resumed_mid_epoch_with_batch_sizes_it_cannot_continue_warns(tmp_path):
    """Batches of 12 (the loader of 40 samples makes 48 a pass) cannot hold what 4 steps of 4 took: said, not continued
    silently from the saved step count (so with another process count: ``tests/distributed/test_resume_combined.py``)."""
    fit(str(tmp_path / "whole"), Combined, combined(4), {"every_n_train_steps": 2}, max_epochs=1)
    with pytest.warns(UserWarning, match=r"Resuming in the middle of epoch 0 .*cannot be continued exactly: each "
                      r"loader's \[samples of all processes per step, steps per pass\] were \[\[4, 10\], \[4, 6\]\] "
                      r"when it was saved and are \[\[12, 4\], \[12, 2\]\] now.* continues after 1 steps .*Resume "
                      "from a checkpoint of an epoch's end, or on the process count and batch sizes of the saving run"):
        trainer, _ = fit(str(tmp_path / "resumed"), Combined, combined(12), {"every_n_train_steps": 2},
                         ckpt_path=str(tmp_path / "whole" / "ck" / "step=4.ckpt"), max_epochs=1)
    assert trainer.global_step == 4 + 3


class RandomData(Net):
    """Its ``train_dataloader`` draws its data from the global RNG (as Lightning's ``RandomDataset`` does): a
    resumed fit draws it again, and the random states saved at the checkpoint come back after that."""

    def train_dataloader(self) -> DataLoader:
        x = torch.randn(24, 4)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4, shuffle=True)


def test_a_train_loader_built_from_random_draws_leaves_the_resumed_rng_where_the_checkpoint_had_it(tmp_path):
    ckpt = {"every_n_train_steps": 4}
    whole = fit(str(tmp_path / "whole"), RandomData, None, ckpt)
    resumed = fit(str(tmp_path / "resumed"), RandomData, None, ckpt,
                  ckpt_path=str(tmp_path / "whole" / "ck" / "step=8.ckpt"))
    assert_same_end(whole, resumed, saved_at=8)
