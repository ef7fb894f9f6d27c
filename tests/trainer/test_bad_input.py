"""Bad input that used to be silent or unclear (issue 11, item 9): losses without grad or not finite, several
optimizers under automatic optimization, a checkpoint folder that is a file, a ckpt_path that is not a path."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.nn import functional as F

from stoker import ModelCheckpoint, Trainer
from tests.helpers.models import Regressor, batches, make_loader, make_mlp, make_regression_data
from tests.helpers.sync_counter import SyncCounter
from tests.helpers.trainers import quiet_trainer as bare
from tests.helpers.weights import params_of

DATA = make_regression_data(n=64)  # 8 batches of 8


class Loss(Regressor):
    """A Regressor whose loss is replaced at (epoch, batch_idx) pairs by ``make(loss)``."""

    def __init__(self, make: Any, at: tuple[tuple[int, int], ...] = ((0, 2),), momentum: float = 0.9,
                 scheduler: str | None = None) -> None:
        super().__init__(momentum=momentum, scheduler=scheduler)
        self.make, self.at, self.calls = make, at, 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.calls += 1
        loss = super().training_step(batch, batch_idx)
        return self.make(loss) if (self.trainer.current_epoch, batch_idx) in self.at else loss


def nan(loss: torch.Tensor) -> torch.Tensor:
    return loss * float("nan")


# -- a loss without grad ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda loss: loss.detach(), lambda loss: torch.tensor(1.0)])
def test_a_loss_without_grad_names_training_step(make: Any) -> None:
    with pytest.raises(ValueError, match=r"training_step returned a loss that does not require grad .*not "
                                         r"loss.detach\(\)"):
        bare(max_steps=4).fit(Loss(make, at=((0, 0),)), make_loader(DATA))


# -- a non-finite loss ----------------------------------------------------------------------------------------------
def test_a_nan_loss_raises_by_default_naming_step_and_batch() -> None:
    module = Loss(nan, at=((0, 2),))
    with pytest.raises(ValueError, match=r"training_step at global_step 2 \(epoch 0, batch_idx 2\) was not finite"):
        bare(max_epochs=2).fit(module, make_loader(DATA))
    assert module.calls == 8  # noticed at the epoch's end (no per-step device->host read), not later


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_loss_raises_at_the_next_log_step(value: float) -> None:
    module = Loss(lambda loss: loss * value, at=((0, 5),))
    with pytest.raises(ValueError, match=r"global_step 5 \(epoch 0, batch_idx 5\) was not finite.*noticed at "
                                         r"global_step 6"):
        bare(max_epochs=1, log_every_n_steps=3).fit(module, make_loader(DATA))
    assert module.calls == 6


def test_no_checkpoint_is_written_after_a_nan_loss(tmp_path: Any) -> None:
    ckpt = ModelCheckpoint(every_n_train_steps=1, save_top_k=-1, save_last=True)
    trainer = Trainer(logger=False, enable_progress_bar=False, callbacks=[ckpt], default_root_dir=str(tmp_path),
                      max_epochs=1)
    with pytest.raises(ValueError, match=r"global_step 2 \(epoch 0, batch_idx 2\)"):
        trainer.fit(Loss(nan, at=((0, 2),)), make_loader(DATA))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "last.ckpt"]


def test_skip_never_reaches_the_optimizer_or_the_scheduler() -> None:
    module = Loss(nan, at=((0, 2), (1, 5)), scheduler="lambda")
    with pytest.warns(RuntimeWarning, match=r"was not finite .* step was skipped") as record:
        trainer = bare(max_epochs=2, on_nonfinite_loss="skip")
        trainer.fit(module, make_loader(DATA))
    skipped = [str(w.message) for w in record if "was skipped" in str(w.message)]
    assert len(skipped) == 2
    assert "global_step 2 (epoch 0, batch_idx 2)" in skipped[0] and "global_step 12 (epoch 1, batch_idx 5)" in \
        skipped[1]
    assert trainer.global_step == 14  # 16 batches, 2 skipped
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 14  # the user's scheduler (Lightning's config)

    # The same as a loop that never saw those two batches (SGD with momentum: any stray step would show).
    expected = make_mlp(seed=0)
    kept = [b for i, b in enumerate(batches(DATA, 8)) if i != 2] + [b for i, b in enumerate(batches(DATA, 8))
                                                                    if i != 5]
    from tests.helpers.models import make_scheduler

    opt = torch.optim.SGD(expected.parameters(), lr=0.05, momentum=0.9)
    sched = make_scheduler(opt, "lambda")
    for x, y in kept:
        F.mse_loss(expected(x), y).backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    for got, want in zip(module.net.parameters(), expected.parameters()):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_skip_drops_the_whole_accumulation_window() -> None:
    module = Loss(nan, at=((0, 3),))
    with pytest.warns(RuntimeWarning, match=r"batch_idx 3\) was not finite"):
        trainer = bare(max_epochs=1, accumulate=2, on_nonfinite_loss="skip")
        trainer.fit(module, make_loader(DATA))
    assert trainer.global_step == 3  # windows (0,1) (2,3) (4,5) (6,7): the second one skipped
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_warn_trains_on() -> None:
    module = Loss(nan, at=((0, 6),))
    with pytest.warns(RuntimeWarning, match=r"global_step 6 \(epoch 0, batch_idx 6\) was not finite .*training "
                                            r"goes on"):
        trainer = bare(max_epochs=1, on_nonfinite_loss="warn")
        trainer.fit(module, make_loader(DATA))
    assert trainer.global_step == 8 and module.calls == 8
    assert not all(torch.isfinite(p).all() for p in module.parameters())  # as a plain loop would


def test_finite_losses_are_checked_without_a_device_to_host_read_per_step() -> None:
    trainer = bare(max_epochs=1, log_every_n_steps=1000)
    module = Regressor()
    loader = make_loader(make_regression_data(n=256), 8)
    with SyncCounter() as syncs:
        trainer.fit(module, loader)
    assert trainer.global_step == 32
    checks = [e for e in syncs.events if "nonfinite.py" in e.site]
    assert len(checks) == 1, syncs.report()  # one look at the epoch's end, for 32 steps

    skipping = bare(max_epochs=1, log_every_n_steps=1000, on_nonfinite_loss="skip")
    with SyncCounter() as syncs:
        skipping.fit(Regressor(), loader)
    checks = [e for e in syncs.events if "nonfinite.py" in e.site]
    assert len(checks) == 32, syncs.report()  # "skip" must decide before each step: its documented cost


def test_on_nonfinite_loss_must_be_a_policy() -> None:
    with pytest.raises(ValueError, match=r"Trainer\(on_nonfinite_loss='ignore'\) is not a policy. Expected one of: "
                                         r"'raise', 'skip', 'warn'"):
        bare(on_nonfinite_loss="ignore")


# -- several optimizers ---------------------------------------------------------------------------------------------
class TwoOptimizers(Regressor):
    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.Adam(self.net[2].parameters())]


def test_several_optimizers_under_automatic_optimization_point_to_manual_optimization() -> None:
    module = TwoOptimizers()
    before = params_of(module)
    with pytest.raises(ValueError, match=r"returned 2 optimizers \(SGD, Adam\).*automatic_optimization = False"):
        bare(max_steps=2).fit(module, make_loader(DATA))
    for got, want in zip(params_of(module), before):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# -- ModelCheckpoint folder ------------------------------------------------------------------------------------------
def test_checkpoint_dirpath_that_is_a_file_fails_at_construction(tmp_path: Any) -> None:
    a_file = tmp_path / "ckpts"
    a_file.write_text("x")
    with pytest.raises(ValueError, match=r"ModelCheckpoint\(dirpath=...\): .*ckpts' is a file"):
        ModelCheckpoint(dirpath=a_file)
    with pytest.raises(ValueError, match=r"cannot be created: .*ckpts' is a file"):
        ModelCheckpoint(dirpath=a_file / "inner")


def test_default_checkpoint_folder_blocked_by_a_file_fails_before_training(tmp_path: Any) -> None:
    (tmp_path / "checkpoints").write_text("x")
    module = Regressor()
    trainer = Trainer(logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path), max_epochs=1)
    with pytest.raises(ValueError, match=r"default dirpath .*checkpoints' is a file"):
        trainer.fit(module, make_loader(DATA))
    assert trainer.global_step == 0


# -- ckpt_path -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [123, True, 1.5])
def test_ckpt_path_that_is_not_a_path_lists_the_accepted_values(bad: Any) -> None:
    match = rf"ckpt_path={bad!r} \({type(bad).__name__}\) is not a checkpoint. Expected one of: None .*'last'.*a str "
    with pytest.raises(TypeError, match=match):
        bare(max_steps=1).fit(Regressor(), make_loader(DATA), ckpt_path=bad)
    with pytest.raises(TypeError, match=match):
        bare().validate(Regressor(), make_loader(DATA), ckpt_path=bad)

