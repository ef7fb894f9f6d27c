"""WeightAveraging / EMAWeightAveraging in real fits: the average against one computed by hand from the weights seen
after each step, validation with the average, the module holding it at the end, and an exact resume."""

from __future__ import annotations

import pytest
import torch

from stoker import Callback
from stoker.callbacks import EMAWeightAveraging, WeightAveraging
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.weights import state_of


class _Recorder(Callback):
    """The module's parameters after each training batch, and at each validation start (in the callbacks' order)."""

    def __init__(self) -> None:
        self.after_steps: list[dict[str, torch.Tensor]] = []
        self.at_validation: list[dict[str, torch.Tensor]] = []
        self.after_validation: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.after_steps.append({k: v.detach().clone() for k, v in module.named_parameters()})

    def on_validation_epoch_start(self, trainer, module):
        self.at_validation.append({k: v.detach().clone() for k, v in module.named_parameters()})

    def on_validation_end(self, trainer, module):
        self.after_validation.append({k: v.detach().clone() for k, v in module.named_parameters()})


def _ema(weights: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    average = dict(weights[0])  # the first update takes the weights as they are
    for seen in weights[1:]:
        average = {k: decay * average[k] + (1 - decay) * seen[k] for k in average}
    return average


def test_ema_of_every_step_ends_in_the_module(tmp_path):
    record = _Recorder()
    ema = EMAWeightAveraging(decay=0.7)
    module = Regressor()
    trainer(tmp_path, max_epochs=2, callbacks=[record, ema], enable_checkpointing=False).fit(module, loaders()[0])
    assert len(record.after_steps) == 8 and int(ema.average_model.n_averaged) == 8
    expected = _ema(record.after_steps, 0.7)
    for name, value in module.named_parameters():  # the module ends fit holding the average
        torch.testing.assert_close(value.detach(), expected[name], msg=name)


def test_validation_runs_with_the_average_and_training_goes_on_with_its_own_weights(tmp_path):
    averaging = WeightAveraging()  # the plain mean of the weights after each step
    record = _Recorder()  # after the averaging callback: sees what validation sees
    module = Regressor()
    t = trainer(tmp_path, max_epochs=2, callbacks=[averaging, record], enable_checkpointing=False,
                num_sanity_val_steps=0)
    t.fit(module, *loaders())
    first_epoch = record.after_steps[:4]
    mean = {k: sum(w[k] for w in first_epoch) / 4 for k in first_epoch[0]}
    for name, value in record.at_validation[0].items():
        torch.testing.assert_close(value, mean[name], msg=name)
    # after validation the module holds its trained weights again, exactly
    assert all(torch.equal(record.after_validation[0][k], record.after_steps[3][k]) for k in mean)
    assert any(not torch.equal(record.after_steps[3][k], mean[k]) for k in mean)
    assert int(averaging.average_model.n_averaged) == 8


def test_when_the_average_updates():
    ema = EMAWeightAveraging(update_every_n_steps=4, update_starting_at_step=6)
    assert [s for s in range(20) if ema.should_update(step_idx=s)] == [8, 12, 16]
    assert not ema.should_update(epoch_idx=5)  # no epoch updates unless a starting epoch is given
    by_epoch = EMAWeightAveraging(update_every_n_steps=0, update_starting_at_epoch=1)
    assert not by_epoch.should_update(step_idx=0)
    assert [e for e in range(4) if by_epoch.should_update(epoch_idx=e)] == [1, 2, 3]
    assert WeightAveraging().should_update(step_idx=3) and not WeightAveraging().should_update(epoch_idx=3)


@pytest.mark.parametrize("bad", [{"decay": 1.5}, {"decay": True}, {"update_every_n_steps": -1},
                                 {"update_starting_at_step": 2.0}, {"update_starting_at_epoch": -3}])
def test_bad_ema_settings_are_refused(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=rf"EMAWeightAveraging\({name}="):
        EMAWeightAveraging(**bad)


def test_the_average_is_a_copy_without_the_trainer(tmp_path):
    averaging = WeightAveraging(device=None)
    module = Regressor()
    trainer(tmp_path, max_epochs=1, callbacks=[averaging], enable_checkpointing=False).fit(module, loaders()[0])
    copy = averaging.average_model.module
    assert copy is not module and type(copy) is Regressor
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        _ = copy.trainer


def test_nothing_averaged_leaves_the_weights_alone(tmp_path):
    never = EMAWeightAveraging(update_starting_at_step=1000)
    record = _Recorder()
    module = Regressor()
    trainer(tmp_path, max_epochs=1, callbacks=[record, never], enable_checkpointing=False,
            num_sanity_val_steps=0).fit(module, *loaders())
    assert state_of(module).keys() and all(torch.equal(v.detach(), record.after_steps[-1][k])
                                           for k, v in module.named_parameters())
    assert all(torch.equal(record.at_validation[0][k], record.after_steps[-1][k]) for k in record.at_validation[0])


def test_a_resumed_fit_ends_with_the_same_average(tmp_path):
    train, _ = loaders(n=32, shuffle=True)

    def run(root, epochs, **fit):
        ema = EMAWeightAveraging(decay=0.9, update_every_n_steps=3)
        module = Regressor()
        trainer(root, max_epochs=epochs, callbacks=[ema]).fit(module, train, **fit)
        return module, ema

    whole, whole_ema = run(tmp_path / "whole", 4)
    run(tmp_path / "parts", 2)
    resumed, resumed_ema = run(tmp_path / "parts", 4, ckpt_path="last")
    assert int(resumed_ema.average_model.n_averaged) == int(whole_ema.average_model.n_averaged) == 6
    for name, value in state_of(whole).items():
        torch.testing.assert_close(state_of(resumed)[name], value, rtol=0, atol=0, msg=name)


def test_an_override_of_setup_that_skips_the_base_is_named(tmp_path):
    class Forgets(WeightAveraging):
        def setup(self, trainer, module, stage):
            pass

    t = trainer(tmp_path, max_epochs=1, callbacks=[Forgets()], enable_checkpointing=False)
    with pytest.raises(RuntimeError, match=r"Forgets: the average is built when a fit sets up .*super\(\).setup"):
        t.fit(Regressor(), loaders()[0])
