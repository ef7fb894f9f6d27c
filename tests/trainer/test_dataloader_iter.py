"""Steps that take ``dataloader_iter``: the step pulls its own batches (``batch_iter.py``). Checked here: what the
step and the batch hooks get, the limits, the end of an epoch (known ahead, or a ``StopIteration``), the weights
against a plain loop, an exact resume mid-epoch, and the combinations refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from stoker import GradientAccumulationScheduler
from tests.helpers.models import Regressor, clone_model, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer as bare


class PairSteps(Regressor):
    """Each step pulls ``per_step`` batches and trains on their mean loss; records the pulls and the hooks."""

    def __init__(self, per_step: int = 2, **kwargs: Any) -> None:
        super().__init__(momentum=0.0, **kwargs)
        self.per_step = per_step
        self.pulls: list[tuple[str, int, int]] = []
        self.starts: list[tuple[str, Any, int]] = []
        self.ends: list[tuple[str, Any, int]] = []
        self.rows: list[int] = []  # which row of the dataset each pulled batch starts with

    def _pull(self, stage: str, dataloader_iter: Any) -> list[Any]:
        batches = []
        for _ in range(self.per_step):
            try:
                batch, batch_idx, dataloader_idx = next(dataloader_iter)
            except StopIteration:
                break
            self.pulls.append((stage, batch_idx, dataloader_idx))
            self.rows.append(_row(batch[0][0]))
            batches.append(batch)
        return batches

    def _loss(self, batches: list[Any]) -> torch.Tensor:
        return torch.stack([F.mse_loss(self(x), y) for x, y in batches]).mean()

    def training_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
        return self._loss(self._pull("train", dataloader_iter))

    def validation_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
        self.log("val/loss", self._loss(self._pull("validate", dataloader_iter)))

    def test_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
        self._pull("test", dataloader_iter)

    def predict_step(self, dataloader_iter: Any) -> Any:  # type: ignore[override]
        return [self(x) for x, _ in self._pull("predict", dataloader_iter)]

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.starts.append(("train", None if batch is None else int(batch[0].shape[0]), batch_idx))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ends.append(("train", int(batch[0].shape[0]), batch_idx))


_DATA = make_regression_data(96)


def _row(x: torch.Tensor) -> int:
    """The row of ``_DATA`` (or a dataset made the same way, a prefix of it) that ``x`` is."""
    return int((_DATA.tensors[0] == x).all(dim=1).nonzero()[0])


def _trainer(**kwargs: Any) -> Any:
    kwargs.setdefault("max_epochs", 1)
    kwargs.setdefault("num_sanity_val_steps", 0)
    return bare(**kwargs)


def test_training_step_pulls_its_batches_and_the_hooks_see_the_last_pulled() -> None:
    model = PairSteps()
    data = make_loader(make_regression_data(64), batch_size=8)  # 8 batches: 4 steps of 2
    trainer = _trainer(limit_val_batches=0)
    trainer.fit(model, data)
    assert [p[1] for p in model.pulls] == list(range(8))
    assert trainer.global_step == 4
    assert model.starts == [("train", None, 0), ("train", 8, 1), ("train", 8, 3), ("train", 8, 5)]
    assert model.ends == [("train", 8, 1), ("train", 8, 3), ("train", 8, 5), ("train", 8, 7)]
    assert trainer.fit_loop.batches_done == 0 and trainer.current_epoch == 1


def test_weights_equal_a_plain_loop_over_pairs_of_batches() -> None:
    dataset = make_regression_data(48)
    model = PairSteps()
    reference = clone_model(model.net)
    _trainer(max_epochs=2, limit_val_batches=0).fit(model, make_loader(dataset, batch_size=8))
    opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    pairs = list(make_loader(dataset, batch_size=8))
    for _ in range(2):
        for i in range(0, len(pairs), 2):
            loss = torch.stack([F.mse_loss(reference(x), y) for x, y in pairs[i:i + 2]]).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for ours, theirs in zip(model.net.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_limits_count_the_batches_pulled_in_every_stage() -> None:
    model = PairSteps()
    data = make_loader(make_regression_data(64), batch_size=8)
    trainer = _trainer(limit_train_batches=4, limit_val_batches=2, limit_test_batches=2, limit_predict_batches=2,
                       num_sanity_val_steps=2)
    trainer.fit(model, data, data)
    stages = [p[0] for p in model.pulls]
    assert stages.count("train") == 4 and stages.count("validate") == 4  # the sanity check's 2, then 2
    assert trainer.global_step == 2
    trainer.test(model, data)
    predictions = trainer.predict(model, data)
    assert [p[0] for p in model.pulls].count("test") == 2
    assert len(predictions) == 1 and len(predictions[0]) == 2


def test_several_eval_loaders_are_read_one_after_the_other_through_one_iterator() -> None:
    model = PairSteps(per_step=1)
    a, b = make_loader(make_regression_data(16), 8), make_loader(make_regression_data(24), 8)
    trainer = _trainer()
    trainer.validate(model, [a, b])
    assert [p[1:] for p in model.pulls] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert set(trainer.callback_metrics) == {"val/loss/dataloader_idx_0", "val/loss/dataloader_idx_1"}
    predictions = trainer.predict(model, [a, b])
    assert [len(p) for p in predictions] == [2, 3]


class Records(PairSteps):
    """Records the eval batch hooks' arguments (several loaders: with ``dataloader_idx``)."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.starts.append(("predict", batch_idx, dataloader_idx))

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.ends.append(("predict", batch_idx, dataloader_idx))


def test_eval_hooks_get_the_indices_of_the_batch_last_pulled() -> None:
    model = Records(per_step=1)
    a, b = make_loader(make_regression_data(16), 8), make_loader(make_regression_data(8), 8)
    _trainer().predict(model, [a, b])
    assert model.starts == [("predict", 0, 0), ("predict", 0, 0), ("predict", 1, 0)]
    assert model.ends == [("predict", 0, 0), ("predict", 1, 0), ("predict", 0, 1)]


class Stream(IterableDataset):
    """``n`` regression pairs one at a time, without a length."""

    def __init__(self, n: int) -> None:
        self.data = make_regression_data(n)

    def __iter__(self) -> Any:
        return iter(self.data)


def test_the_end_is_known_without_a_length_so_no_step_meets_an_empty_iterator() -> None:
    model = PairSteps()
    trainer = _trainer(limit_val_batches=0)
    trainer.fit(model, DataLoader(Stream(32), batch_size=8))  # 4 batches, no len()
    assert len(model.pulls) == 4 and trainer.global_step == 2


class StopsEarly(PairSteps):
    """Ends each epoch with ``StopIteration`` at its second step, before touching the iterator."""

    def training_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
        if self.trainer.fit_loop.batches_done == 2:
            raise StopIteration
        return super().training_step(dataloader_iter)


def test_stop_iteration_out_of_the_step_ends_the_epoch_and_the_next_starts_afresh() -> None:
    model = StopsEarly()
    trainer = _trainer(max_epochs=2, limit_val_batches=0)
    trainer.fit(model, make_loader(make_regression_data(64), batch_size=8))
    assert [p[1] for p in model.pulls] == [0, 1, 0, 1]  # the second epoch starts at the loader's first batch
    assert model.rows == [0, 8, 0, 8]
    assert trainer.global_step == 2 and trainer.current_epoch == 2


def test_resume_mid_epoch_continues_at_the_first_batch_not_pulled(tmp_path: Any) -> None:
    dataset = make_regression_data(96)

    def loader() -> DataLoader:
        torch.manual_seed(5)
        return make_loader(dataset, batch_size=8, shuffle=True)

    full = PairSteps()
    _trainer(max_epochs=2, limit_val_batches=0).fit(full, loader())

    stopped = bare(max_epochs=2, limit_val_batches=0, max_steps=4, num_sanity_val_steps=0)  # 8 of 12 batches
    stopped.fit(PairSteps(), loader())
    stopped.save_checkpoint(tmp_path / "mid")
    assert stopped.fit_loop.batches_done == 8 and stopped.current_epoch == 0

    resumed = PairSteps()
    _trainer(max_epochs=2, limit_val_batches=0).fit(resumed, loader(), ckpt_path=str(tmp_path / "mid"))
    assert [p[1] for p in resumed.pulls][:4] == [8, 9, 10, 11]
    for ours, theirs in zip(resumed.net.parameters(), full.net.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_val_check_interval_counts_batches_pulled() -> None:
    model = PairSteps()
    trainer = _trainer(val_check_interval=3, limit_val_batches=1)
    trainer.fit(model, make_loader(make_regression_data(64), 8), make_loader(make_regression_data(16), 8))
    # steps end after batches 2, 4, 6, 8: the 3rd and the 6th batch fall in the 2nd and the 3rd step (the 8th is
    # no multiple of 3: no validation at the epoch's end, as with batch steps)
    assert model.validations == 2


def test_a_step_that_takes_another_required_argument_is_refused() -> None:
    class Extra(PairSteps):
        def training_step(self, dataloader_iter: Any, batch_idx: int) -> torch.Tensor:  # type: ignore[override]
            return super().training_step(dataloader_iter)

        def validation_step(self, dataloader_iter: Any, batch_idx: int) -> None:  # type: ignore[override]
            return None

    with pytest.raises(TypeError, match="'batch_idx'"):
        _trainer().validate(Extra(), make_loader(make_regression_data(16), 8))
    with pytest.raises(TypeError, match="dataloader_iter"):
        _trainer(limit_val_batches=0).fit(Extra(), make_loader(make_regression_data(16), 8))


def test_accumulation_is_refused() -> None:
    data = make_loader(make_regression_data(32), 8)
    with pytest.raises(ValueError, match="accumulate"):
        _trainer(accumulate_grad_batches=2, limit_val_batches=0).fit(PairSteps(), data)
    scheduler = GradientAccumulationScheduler({1: 2})
    with pytest.raises(ValueError, match="accumulat"):
        _trainer(max_epochs=2, limit_val_batches=0, callbacks=[scheduler]).fit(PairSteps(), data)


def test_an_optimizer_that_evaluates_the_loss_again_is_refused() -> None:
    class WithLBFGS(PairSteps):
        def configure_optimizers(self) -> Any:
            return torch.optim.LBFGS(self.parameters())

    with pytest.raises(ValueError, match="LBFGS"):
        _trainer(limit_val_batches=0).fit(WithLBFGS(), make_loader(make_regression_data(32), 8))


def test_a_prediction_writer_is_refused(tmp_path: Any) -> None:
    from stoker.callbacks import BasePredictionWriter

    class Writer(BasePredictionWriter):
        def write_on_batch_end(self, *args: Any) -> None:
            pass

    with pytest.raises(ValueError, match="Writer writes each batch"):
        _trainer(callbacks=[Writer()]).predict(PairSteps(), make_loader(make_regression_data(16), 8))


def test_an_epoch_mean_logged_in_training_needs_a_batch_size() -> None:
    class Logs(PairSteps):
        def training_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
            loss = super().training_step(dataloader_iter)
            self.log("step_only", loss)  # on_step alone: no weight needed
            self.log("sized", loss, on_epoch=True, batch_size=16)
            if self.trainer.current_epoch == 1:
                self.log("unsized", loss, on_epoch=True)
            return loss

    trainer = _trainer(max_epochs=2, limit_val_batches=0)
    with pytest.raises(ValueError, match="batch_size=N"):
        trainer.fit(Logs(), make_loader(make_regression_data(32), 8))
    assert trainer.current_epoch == 1 and "sized_epoch" in trainer.callback_metrics


def test_an_epoch_ended_by_stop_iteration_resumes_at_the_next_epochs_first_batch(tmp_path: Any) -> None:
    data = make_loader(make_regression_data(64), batch_size=8)
    first = _trainer(limit_val_batches=0)
    first.fit(StopsEarly(), data)  # epoch 0 ends after batch 1, 6 batches unread
    first.save_checkpoint(tmp_path / "end")
    resumed = StopsEarly()
    _trainer(max_epochs=2, limit_val_batches=0).fit(resumed, data, ckpt_path=str(tmp_path / "end"))
    assert [p[1] for p in resumed.pulls] == [0, 1] and resumed.rows == [0, 8]


def test_a_validation_ended_by_stop_iteration_starts_its_loader_again_next_time() -> None:
    class OneThenStop(PairSteps):
        def validation_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
            if self.pulls and self.pulls[-1][0] == "validate":  # the validation's second step
                raise StopIteration
            self._pull("validate", dataloader_iter)

    model = OneThenStop(per_step=1)
    data = make_loader(make_regression_data(32), 8)
    _trainer(max_epochs=2).fit(model, data, data)  # the same val loader object in both validations
    assert [row for row, (stage, _, _) in zip(model.rows, model.pulls) if stage == "validate"] == [0, 0]


def test_manual_optimization_steps_as_often_as_the_step_says() -> None:
    class Manual(PairSteps):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
            opt = self.optimizers()
            for x, y in self._pull("train", dataloader_iter):  # one optimizer step per batch pulled
                opt.zero_grad()
                self.manual_backward(F.mse_loss(self(x), y))
                opt.step()

    trainer = _trainer(limit_val_batches=0)
    trainer.fit(Manual(), make_loader(make_regression_data(40), batch_size=8))  # 5 batches: steps of 2, 2, 1
    assert trainer.global_step == 5 and trainer.fit_loop.total_batches == 5


def test_the_flavour_is_told_by_the_parameter_name_through_decorators() -> None:
    from stoker.trainer.step_args import takes_iterator

    class Steps:
        @torch.no_grad()
        def decorated(self, dataloader_iter: Any) -> None: ...

        def varargs(self, *args: Any) -> None: ...

        def batch(self, batch: Any, batch_idx: int) -> None: ...

    steps = Steps()
    assert takes_iterator(steps.decorated)
    assert not takes_iterator(steps.varargs) and not takes_iterator(steps.batch)
