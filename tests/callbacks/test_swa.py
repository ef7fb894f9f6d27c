"""StochasticWeightAveraging in real fits, against torch.optim.swa_utils' recipe written by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from stoker import StochasticWeightAveraging
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor, make_mlp
from tests.helpers.weights import state_of


def _by_hand(data, epochs: int, swa_start: int, swa_lr: float, anneal: int, strategy: str) -> nn.Module:
    """torch.optim.swa_utils' documented recipe, with the module's StepLR before averaging starts."""
    net = make_mlp(seed=0, batch_norm=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    average = AveragedModel(net, device="cpu")
    swa_scheduler = None
    for epoch in range(epochs):
        if epoch == swa_start:
            swa_scheduler = SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=anneal, anneal_strategy=strategy)
        for x, y in data:
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if epoch >= swa_start:
            average.update_parameters(net)
            swa_scheduler.step()
        else:
            scheduler.step()
    with torch.no_grad():
        for mine, averaged in zip(net.parameters(), average.module.parameters()):
            mine.copy_(averaged)
    update_bn(data, net)
    return net


def test_matches_the_swa_utils_recipe_exactly(tmp_path):
    train, _ = loaders(n=32, shuffle=False)
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=2, annealing_strategy="linear")
    t = trainer(tmp_path, max_epochs=4, callbacks=[swa], enable_checkpointing=False)
    module = Regressor(batch_norm=True, scheduler="epoch", momentum=0.0)
    t.fit(module, train)
    expected = _by_hand(train, epochs=4, swa_start=1, swa_lr=0.02, anneal=2, strategy="linear")
    assert swa.start_epoch == 1 and swa.n_averaged == 3
    got, want = state_of(module.net), state_of(expected)
    assert got.keys() == want.keys()
    for name in want:  # weights averaged, BatchNorm statistics recomputed for them
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, msg=name)
    assert t.lr_scheduler_configs[0].scheduler is swa._swa_scheduler
    assert t.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.02)


def test_a_resumed_run_ends_with_the_same_average(tmp_path):
    train, _ = loaders(n=32, shuffle=True)

    def run(root, epochs, **fit):
        swa = StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1, annealing_epochs=3)
        module = Regressor(batch_norm=True, scheduler="epoch", momentum=0.0)
        trainer(root, max_epochs=epochs, callbacks=[swa]).fit(module, train, **fit)
        return module, swa

    whole, whole_swa = run(tmp_path / "whole", 4)
    run(tmp_path / "parts", 2)  # its checkpoint holds 2 averaged epochs and SWALR halfway through its annealing
    resumed, resumed_swa = run(tmp_path / "parts", 4, ckpt_path="last")
    assert resumed_swa.n_averaged == whole_swa.n_averaged == 4
    for name, value in state_of(whole).items():
        torch.testing.assert_close(state_of(resumed)[name], value, rtol=0, atol=0, msg=name)


def test_a_step_scheduler_stops_when_averaging_starts(tmp_path):
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=0.5, annealing_epochs=1,
                                    annealing_strategy="linear")
    t = trainer(tmp_path, max_epochs=4, callbacks=[swa], enable_checkpointing=False)
    t.fit(Regressor(scheduler="step"), loaders()[0])  # StepLR per 2 steps would halve the rate 6 more times
    assert swa.start_epoch == 1 and swa.n_averaged == 3  # 0.5 of 4 epochs: the 2nd epoch, index 1
    assert t.optimizers[0].param_groups[0]["lr"] == 0.02
    assert t.lr_scheduler_configs[0].interval == "epoch"


def test_one_swa_lr_per_param_group(tmp_path):
    from stoker import Callback

    class Groups(Callback):
        def on_train_epoch_start(self, trainer, module):
            groups = trainer.optimizers[0].param_groups
            self.seen = [(g["lr"], g["swa_lr"], g["initial_lr"]) for g in groups]

    swa, seen = StochasticWeightAveraging([0.3, 0.7], swa_epoch_start=1, annealing_epochs=2), Groups()
    t = trainer(tmp_path, max_epochs=2, callbacks=[swa, seen], enable_checkpointing=False)
    t.fit(Regressor(lr=0.1, groups=True, momentum=0.0), loaders()[0])
    # the second epoch's rates: half way (cos) from the group's rate to its own swa_lr, which is now the base rate
    assert seen.seen == [(pytest.approx(0.2), 0.3, 0.3), (pytest.approx(0.01 + 0.69 / 2), 0.7, 0.7)]
    assert t.lr_scheduler_configs[0].scheduler.base_lrs == [0.3, 0.7]


def test_custom_average_function_and_no_batch_norm(tmp_path):
    from stoker import Callback

    class Snapshot(Callback):
        def on_train_epoch_end(self, trainer, module):
            self.trained = {n: p.detach().clone() for n, p in module.named_parameters()}

    def run(avg_fn):
        swa = StochasticWeightAveraging(0.05, swa_epoch_start=1, avg_fn=avg_fn)
        snapshot, module = Snapshot(), Regressor()
        trainer(tmp_path, max_epochs=3, callbacks=[swa, snapshot], enable_checkpointing=False).fit(module, loaders()[0])
        assert swa.n_averaged == 3
        return {n: p.detach() for n, p in module.named_parameters()}, snapshot.trained

    newest, trained = run(lambda averaged, current, n: current)  # an "average" that keeps the newest weights
    for name, value in trained.items():
        torch.testing.assert_close(newest[name], value, rtol=0, atol=0)
    mean, trained = run(None)
    assert not torch.equal(mean["net.0.weight"], trained["net.0.weight"])


def test_configuration_errors(tmp_path):
    class TwoOptimizers(Regressor):
        automatic_optimization = False  # several optimizers need manual optimization

        def configure_optimizers(self):
            return [torch.optim.SGD(self.net[0].parameters(), lr=0.1),
                    torch.optim.SGD(self.net[2].parameters(), lr=0.1)]

    t = trainer(tmp_path, max_epochs=2, callbacks=[StochasticWeightAveraging(0.1)])
    with pytest.raises(ValueError, match="works with one optimizer"):
        t.fit(TwoOptimizers(), loaders()[0])
    groups = trainer(tmp_path, max_epochs=1, callbacks=[StochasticWeightAveraging([0.1], swa_epoch_start=1)])
    with pytest.raises(ValueError, match="1 learning rates for an optimizer with 2 param groups"):
        groups.fit(Regressor(groups=True), loaders()[0])
    endless = trainer(tmp_path, max_steps=3, callbacks=[StochasticWeightAveraging(0.1, swa_epoch_start=0.5)])
    with pytest.raises(ValueError, match="fraction of max_epochs, but the Trainer has no max_epochs"):
        endless.fit(Regressor(), loaders()[0])
    with pytest.warns(RuntimeWarning, match="no weights will be averaged"):
        trainer(tmp_path, max_epochs=1, callbacks=[StochasticWeightAveraging(0.1, swa_epoch_start=3)]).fit(
            Regressor(), loaders()[0])


def test_batch_norm_without_forward_needs_a_forward_fn(tmp_path):
    class NoForward(Regressor):
        forward = nn.Module.forward  # the Regressor's forward taken away

        def __init__(self):
            super().__init__(batch_norm=True, momentum=0.0)

        def training_step(self, batch, batch_idx):  # without a forward, the loss calls the layers
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

    swa = StochasticWeightAveraging(0.1, swa_epoch_start=1)
    with pytest.raises(ValueError, match="NoForward defines no forward\\(\\). Define forward, or pass forward_fn="):
        trainer(tmp_path, max_epochs=1, callbacks=[swa]).fit(NoForward(), loaders()[0])
    calls = []
    swa = StochasticWeightAveraging(0.1, swa_epoch_start=1, forward_fn=lambda m, b: calls.append(m.net(b[0])))
    trainer(tmp_path, max_epochs=1, callbacks=[swa], enable_checkpointing=False).fit(NoForward(), loaders()[0])
    assert len(calls) == 4  # one pass over the 4 training batches


@pytest.mark.parametrize("kwargs, message", [
    ({"swa_lrs": 0}, "swa_lrs=0"), ({"swa_lrs": [0.1, -1]}, "swa_lrs="), ({"swa_lrs": "a"}, "swa_lrs='a'"),
    ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "swa_epoch_start=0"),
    ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "swa_epoch_start=1.5"),
    ({"swa_lrs": 0.1, "annealing_epochs": -1}, "annealing_epochs=-1"),
    ({"swa_lrs": 0.1, "annealing_strategy": "exp"}, "annealing_strategy='exp'"),
    ({"swa_lrs": 0.1, "avg_fn": 3}, "avg_fn=3"),
    ({"swa_lrs": 0.1, "device": 0}, "device=0"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("[", r"\[").replace("(", r"\(")):
        StochasticWeightAveraging(**kwargs)
