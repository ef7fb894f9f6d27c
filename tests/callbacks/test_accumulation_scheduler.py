"""GradientAccumulationScheduler: the window changes per epoch, exactly as a raw loop that accumulates so."""

from __future__ import annotations

import pytest
import torch

from stoker import GradientAccumulationScheduler
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor, make_mlp
from tests.helpers.weights import params_of


class Recorder(GradientAccumulationScheduler):
    def on_train_epoch_end(self, trainer, module):
        self.seen = getattr(self, "seen", []) + [trainer.accelerator.gradient_accumulation_steps]


def _raw_loop(windows_per_epoch: list[int], data) -> list[torch.Tensor]:
    """The canonical order: each loss divided by its window's length, one SGD step per window."""
    net = make_mlp(seed=0)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    batches = list(data)
    for window in windows_per_epoch:
        for start in range(0, len(batches), window):
            chunk = batches[start:start + window]
            for x, y in chunk:
                (torch.nn.functional.mse_loss(net(x), y) / len(chunk)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return params_of(net)


def test_windows_follow_the_schedule_and_match_a_raw_loop(tmp_path):
    train, _ = loaders(n=40, shuffle=False)  # 5 batches: windows of 2 leave a short last window of 1
    schedule = Recorder({1: 2, 2: 3})
    t = trainer(tmp_path, max_epochs=3, callbacks=[schedule], enable_checkpointing=False)
    module = Regressor(momentum=0.0)  # plain SGD, as the raw loop
    t.fit(module, train)
    assert schedule.seen == [1, 2, 3]
    assert t.global_step == 5 + 3 + 2
    expected = _raw_loop([1, 2, 3], train)
    for got, want in zip(params_of(module.net), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert t.accelerator.gradient_accumulation_steps == 1  # the Trainer's own value again after fit


def test_a_resumed_run_continues_with_the_epochs_value(tmp_path):
    train, _ = loaders(n=32, shuffle=True)
    whole = trainer(tmp_path / "whole", max_epochs=3, callbacks=[GradientAccumulationScheduler({0: 2, 2: 4})])
    reference = Regressor()
    whole.fit(reference, train)
    first = trainer(tmp_path / "parts", max_epochs=2, callbacks=[GradientAccumulationScheduler({0: 2, 2: 4})])
    first.fit(Regressor(), train)
    second = trainer(tmp_path / "parts", max_epochs=3, callbacks=[GradientAccumulationScheduler({0: 2, 2: 4})])
    resumed = Regressor()
    second.fit(resumed, train, ckpt_path="last")
    assert second.global_step == whole.global_step == 2 + 2 + 1
    for got, want in zip(params_of(resumed), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_schedule_table():
    schedule = GradientAccumulationScheduler({4: 2, 8: 5})
    assert schedule.scheduling == {0: 1, 4: 2, 8: 5}
    assert [schedule.get_accumulate_grad_batches(e) for e in (0, 3, 4, 7, 8, 100)] == [1, 1, 2, 2, 5, 5]
    assert schedule.going_to_accumulate_grad_batches()
    assert not GradientAccumulationScheduler({0: 1}).going_to_accumulate_grad_batches()


@pytest.mark.parametrize("bad, error, message", [
    ({}, TypeError, "non-empty dict"),
    ([(0, 2)], TypeError, "non-empty dict"),
    ({-1: 2}, ValueError, "the key -1 is not an epoch"),
    ({"1": 2}, ValueError, "the key '1' is not an epoch"),
    ({0: 0}, ValueError, "0: 0 is not a number of micro-batches"),
    ({0: 2.0}, ValueError, "0: 2.0 is not a number of micro-batches"),
])
def test_bad_schedules(bad, error, message):
    with pytest.raises(error, match=message):
        GradientAccumulationScheduler(bad)


def test_the_trainer_accumulate_and_a_schedule_conflict(tmp_path):
    t = trainer(tmp_path, max_epochs=1, accumulate=2, callbacks=[GradientAccumulationScheduler({0: 4})])
    with pytest.raises(ValueError, match=r"Trainer\(accumulate=2\) and a GradientAccumulationScheduler"):
        t.fit(Regressor(), loaders()[0])
    assert t.accelerator.gradient_accumulation_steps == 2


def test_manual_optimization_is_refused(tmp_path):
    class Manual(Regressor):
        automatic_optimization = False

    t = trainer(tmp_path, max_epochs=1, callbacks=[GradientAccumulationScheduler({0: 4})])
    with pytest.raises(RuntimeError, match="needs automatic optimization"):
        t.fit(Manual(), loaders()[0])


def test_a_module_with_its_own_optimizer_step_is_told_it_runs_once_per_window(tmp_path):
    class OwnStep(Regressor):
        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)

    t = trainer(tmp_path, max_epochs=1, callbacks=[GradientAccumulationScheduler({0: 2})])
    with pytest.warns(UserWarning, match="overrides optimizer_step.*only when an accumulation window closes"):
        t.fit(OwnStep(), loaders()[0])
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*accumulation window closes")
        trainer(tmp_path / "b", max_epochs=1, callbacks=[GradientAccumulationScheduler({0: 2})]).fit(
            Regressor(), loaders()[0])


def test_the_warning_reads_the_module_the_hook_is_given(tmp_path):
    # A hook called by hand (or by another framework's loop) with a module the Trainer has not attached yet: the
    # check is about that module.
    class OwnZeroGrad(Regressor):
        def optimizer_zero_grad(self, *args, **kwargs):
            super().optimizer_zero_grad(*args, **kwargs)

    t = trainer(tmp_path, max_epochs=1)
    assert t.module is None
    with pytest.warns(UserWarning, match="overrides optimizer_zero_grad"):
        GradientAccumulationScheduler({1: 2}).on_train_start(t, OwnZeroGrad())
