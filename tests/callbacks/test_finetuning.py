"""BaseFinetuning / BackboneFinetuning in real fits: what is frozen, when it thaws, at which rate, and resuming."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stoker import BackboneFinetuning, BaseFinetuning, Callback, TrainingModule
from tests.callbacks.modules import SaveAt, loaders, trainer
from tests.helpers.weights import assert_same_weights, state_of

# Tuned's optimizer takes every trainable parameter, BatchNorm's of a backbone frozen with train_bn=True included, so
# thawing that backbone warns that those are optimized already (as in Lightning); the tests of that warning are below.
pytestmark = pytest.mark.filterwarnings("ignore:.*already optimized by this SGD")


class Tuned(TrainingModule):
    """A backbone (Linear, BatchNorm, ReLU) under a head; SGD with momentum over the trainable parameters only."""

    def __init__(self, lr: float = 0.1, step_lr: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
        self.head = nn.Linear(16, 2)
        self.lr, self.step_lr = lr, step_lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr, momentum=0.9)
        if not self.step_lr:
            return optimizer
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


class Probe(Callback):
    """Records, at each epoch's start (after the callbacks before it) and end, what the tests check."""

    def __init__(self) -> None:
        self.rates: list[list[float]] = []  # each group's lr at each epoch start
        self.ends: list[dict[str, Any]] = []
        self.bn_training: list[bool] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.rates.append([g["lr"] for g in trainer.optimizers[0].param_groups])

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.bn_training.append(module.backbone[1].training)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        optimized = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
        self.ends.append({"state": state_of(module.backbone), "groups": len(trainer.optimizers[0].param_groups),
                          "optimized": [id(p) in optimized for p in module.backbone.parameters()]})


def fit(root: Any, callbacks: list[Callback], epochs: int, module: Tuned | None = None, batches: int = 4,
        **kw: Any) -> Tuned:
    module = module or Tuned()
    data = loaders(n=8 * batches, batch_size=8, shuffle=True)[0]
    ckpt = kw.pop("ckpt", None)
    trainer(root, max_epochs=epochs, callbacks=callbacks, **kw).fit(module, data, ckpt_path=ckpt)
    return module


def test_the_backbone_is_frozen_and_outside_the_optimizer_until_its_epoch(tmp_path):
    probe = Probe()
    module = Tuned()
    start = state_of(module.backbone)
    fit(tmp_path, [BackboneFinetuning(unfreeze_backbone_at_epoch=2), probe], 4, module, enable_checkpointing=False)
    for epoch in (0, 1):
        assert probe.ends[epoch]["groups"] == 1
        assert probe.ends[epoch]["optimized"] == [False, False, True, True, ]  # train_bn: BatchNorm trains
        assert_same_weights(probe.ends[epoch]["state"]["0.weight"].unsqueeze(0),
                            start["0.weight"].unsqueeze(0), f"epoch {epoch}")
    assert probe.ends[2]["groups"] == 2 and all(probe.ends[2]["optimized"])
    assert not torch.equal(probe.ends[2]["state"]["0.weight"], start["0.weight"])
    assert probe.rates[2] == [0.1, pytest.approx(0.01)]  # the head's rate times backbone_initial_ratio_lr
    assert all(p.requires_grad for p in module.parameters())


def _expected_rates(head: list[float], at: int, first: float, factor: float, align: bool) -> list[float | None]:
    """The backbone's rate at each epoch start by BackboneFinetuning's documented rule."""
    rates: list[float | None] = []
    previous = None
    for epoch, current in enumerate(head):
        if epoch == at:
            previous = first
        elif epoch > at:
            previous = factor * previous
            previous = current if align and previous > current else previous
        rates.append(previous)
    return rates


@pytest.mark.parametrize("align, step_lr, initial", [(True, False, None), (False, False, 0.05), (True, True, None)])
def test_the_backbone_rate_follows_the_rule_each_epoch(tmp_path, align, step_lr, initial):
    probe = Probe()
    callback = BackboneFinetuning(1, lambda epoch: 1.5 + epoch * 0.0, backbone_initial_lr=initial,
                                  should_align=align)
    fit(tmp_path, [callback, probe], 8, Tuned(step_lr=step_lr), batches=1, enable_checkpointing=False)
    head = [rates[0] for rates in probe.rates]
    assert head == pytest.approx([0.1 * 0.5 ** e for e in range(8)] if step_lr else [0.1] * 8)
    # at the unfreeze epoch: backbone_initial_lr, or the head's rate then times backbone_initial_ratio_lr (0.1)
    expected = _expected_rates(head, 1, head[1] * 0.1 if initial is None else initial, 1.5, align)
    got = [rates[1] if len(rates) > 1 else None for rates in probe.rates]
    assert got == pytest.approx(expected)
    if align and not step_lr:
        assert got[-1] == 0.1  # caught up with the head, and stays there
    if not align:
        assert got[-1] > head[-1]
    assert callback.previous_backbone_lr == pytest.approx(expected[-1])


class ThawAt(BaseFinetuning):
    """Freezes the backbone and thaws it at one epoch, both with the same ``train_bn``."""

    def __init__(self, epoch: int, train_bn: bool) -> None:
        super().__init__()
        self.epoch, self.train_bn = epoch, train_bn

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone, train_bn=self.train_bn)

    def finetune_function(self, pl_module: Any, current_epoch: int, optimizer: Any) -> None:
        if current_epoch == self.epoch:
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, train_bn=self.train_bn)


@pytest.mark.parametrize("train_bn", [True, False])
def test_batch_norm_keeps_its_mode_and_trains_only_with_train_bn(tmp_path, train_bn):
    probe = Probe()
    module = Tuned()
    start = state_of(module.backbone)
    fit(tmp_path, [ThawAt(2, train_bn=train_bn), probe], 3, module, enable_checkpointing=False)
    assert all(probe.bn_training)  # freezing never puts a layer in eval mode
    before = probe.ends[1]["state"]
    assert torch.equal(before["1.weight"], start["1.weight"]) != train_bn
    # frozen with train_bn=False, the layer also stops updating its running statistics
    assert torch.equal(before["1.running_mean"], start["1.running_mean"]) != train_bn
    # thawed: the statistics are tracked again; its parameters join the group only with train_bn
    after = probe.ends[2]
    assert not torch.equal(after["state"]["1.running_mean"], before["1.running_mean"])
    assert after["optimized"] == [True, True, train_bn, train_bn]
    assert module.backbone[1].track_running_stats


def test_backbone_finetuning_freezes_with_batch_norm_trainable_whatever_train_bn(tmp_path):
    # Lightning's rule: train_bn decides only whether the BatchNorm parameters join the thawed group; before the
    # unfreeze they train with the head (configure_optimizers saw them trainable)
    probe = Probe()
    fit(tmp_path, [BackboneFinetuning(1, train_bn=False), probe], 2, enable_checkpointing=False)
    assert probe.ends[0]["optimized"] == [False, False, True, True]
    assert probe.ends[1]["optimized"] == [True, True, True, True] and probe.ends[1]["groups"] == 2


@pytest.mark.parametrize("batch", [8, 10])  # the unfreeze epoch's end; inside the epoch after it
@pytest.mark.parametrize("train_bn", [True, False])
def test_a_fit_resumed_after_the_unfreeze_ends_bit_identical(tmp_path, batch, train_bn):
    def callback() -> BackboneFinetuning:
        return BackboneFinetuning(1, lambda epoch: 1.5, train_bn=train_bn)

    saves = str(tmp_path / "saves")
    whole = fit(tmp_path / "whole", [callback(), SaveAt(saves, {batch})], 4, Tuned(step_lr=True),
                enable_checkpointing=False)
    resumed = fit(tmp_path / "resumed", [callback()], 4, Tuned(step_lr=True), enable_checkpointing=False,
                  ckpt=os.path.join(saves, f"batch{batch}"))
    assert_same_weights(resumed, whole, f"resumed from batch {batch}")


class LayerByLayer(BaseFinetuning):
    """Thaws one more layer of ``backbone`` at each epoch start, at the default rate (a tenth of the first group's)."""

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone, train_bn=False)

    def finetune_function(self, pl_module: Any, current_epoch: int, optimizer: Any) -> None:
        if 1 <= current_epoch <= 2:
            self.unfreeze_and_add_param_group(pl_module.backbone[current_epoch - 1], optimizer)


def test_a_subclass_resumes_its_groups_exactly(tmp_path):
    saves = str(tmp_path / "saves")
    first = LayerByLayer()
    whole = fit(tmp_path / "whole", [first, SaveAt(saves, {12})], 4, enable_checkpointing=False)
    assert [g["params"] for g in first.state_dict()["internal_optimizer_metadata"][0]] == [
        ["head.weight", "head.bias"], ["backbone.0.weight", "backbone.0.bias"],
        ["backbone.1.weight", "backbone.1.bias"]]
    assert [g["lr"] for g in first.state_dict()["internal_optimizer_metadata"][0]] == [0.1, 0.01, 0.01]
    second = LayerByLayer()
    resumed = fit(tmp_path / "resumed", [second], 4, enable_checkpointing=False,
                  ckpt=os.path.join(saves, "batch12"))
    assert_same_weights(resumed, whole, "resumed inside epoch 2")
    assert second.state_dict()["internal_optimizer_metadata"] == first.state_dict()["internal_optimizer_metadata"]


def test_static_helpers_freeze_thaw_and_filter():
    parent = nn.Module()
    parent.own = nn.Parameter(torch.zeros(1))  # a module with parameters of its own beside its children
    parent.inner = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model = nn.ModuleDict({"a": parent, "b": nn.Linear(2, 2)})
    assert len(BaseFinetuning.flatten_modules(model)) == 4  # parent, Linear, BatchNorm, Linear
    BaseFinetuning.freeze([parent, [model["b"]]], train_bn=True)
    assert [p.requires_grad for p in model.parameters()] == [False, False, False, True, True, False, False]
    assert list(BaseFinetuning.filter_params(model, train_bn=False)) == []
    assert len(list(BaseFinetuning.filter_params(model, requires_grad=False))) == 5
    BaseFinetuning.freeze(model, train_bn=False)
    assert not parent.inner[1].track_running_stats and not any(p.requires_grad for p in model.parameters())
    BaseFinetuning.make_trainable(parent)
    assert parent.inner[1].track_running_stats and all(p.requires_grad for p in parent.parameters())
    with pytest.raises(TypeError, match="3"):
        BaseFinetuning.flatten_modules(3)


def test_unfreeze_and_add_param_group_skips_what_the_optimizer_has():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    for layer in (a, b):
        nn.init.zeros_(layer.weight), nn.init.zeros_(layer.bias)  # equal values: still told apart by identity
    BaseFinetuning.freeze(b)
    optimizer = torch.optim.SGD(a.parameters(), lr=0.5)
    BaseFinetuning.unfreeze_and_add_param_group(b, optimizer)
    assert len(optimizer.param_groups) == 2 and optimizer.param_groups[1]["lr"] == pytest.approx(0.05)
    assert optimizer.param_groups[1]["params"] == [b.weight, b.bias]
    with pytest.warns(UserWarning, match="already optimized by this SGD"):
        BaseFinetuning.unfreeze_and_add_param_group([a, b], optimizer, lr=3)
    assert len(optimizer.param_groups) == 2  # nothing new: no empty group


def test_bad_input_is_refused_clearly(tmp_path):
    class Headless(Tuned):
        def __init__(self) -> None:
            super().__init__()
            del self.backbone
            self.trunk = nn.Linear(8, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.trunk(x))

    with pytest.raises(ValueError, match="`backbone` attribute.*Headless has none"):
        fit(tmp_path, [BackboneFinetuning(1)], 1, Headless(), enable_checkpointing=False)
    listed = Tuned()
    del listed.backbone
    listed.backbone = [nn.Linear(8, 16)]  # a plain list is no module: its layers would not even be registered
    with pytest.raises(TypeError, match="Tuned has one of type list"):
        fit(tmp_path, [BackboneFinetuning(1)], 1, listed, enable_checkpointing=False)
    with pytest.raises(ValueError, match="unfreeze_backbone_at_epoch=-1"):
        BackboneFinetuning(-1)
    with pytest.raises(TypeError, match=r"unfreeze_backbone_at_epoch=1\.5"):
        BackboneFinetuning(1.5)
    with pytest.raises(TypeError, match="lambda_func=2"):
        BackboneFinetuning(1, lambda_func=2)
    # an epoch after the unfreeze epoch, without having thawed the backbone (no rate to raise)
    with pytest.raises(RuntimeError, match="reached epoch 3 without thawing the backbone"):
        BackboneFinetuning(1).finetune_function(Tuned(), 3, torch.optim.SGD(Tuned().head.parameters(), lr=0.1))
    with pytest.raises(NotImplementedError, match="freeze_before_training"):
        fit(tmp_path, [BaseFinetuning()], 1, enable_checkpointing=False)


def test_lightning_module_path():
    import stoker
    import stoker.callbacks.finetuning as face

    assert face.BackboneFinetuning is stoker.BackboneFinetuning and face.BaseFinetuning is stoker.BaseFinetuning
    assert face.multiplicative(7) == 2.0


def test_verbose_logs_both_rates_when_the_backbone_rate_changes(tmp_path, caplog):
    caplog.set_level("INFO", logger="stoker.callbacks.finetuning")
    fit(tmp_path, [BackboneFinetuning(1, verbose=True, rounding=3)], 3, batches=1, enable_checkpointing=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "stoker.callbacks.finetuning"]
    assert lines == ["Current lr: 0.1, Backbone lr: 0.01", "Current lr: 0.1, Backbone lr: 0.02"]


class GradNorm(Callback):
    """After each step: (epoch, param groups, the norm of every gradient the optimizer holds), as clipping left it."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, float]] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        groups = trainer.optimizers[0].param_groups
        grads = [p.grad for g in groups for p in g["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        self.seen.append((trainer.current_epoch, len(groups), float(norm)))


def test_gradient_clipping_covers_the_group_a_thaw_added(tmp_path):
    norms = GradNorm()
    fit(tmp_path, [BackboneFinetuning(unfreeze_backbone_at_epoch=1), norms], 2, gradient_clip_val=1e-3,
        gradient_clip_algorithm="norm", enable_checkpointing=False)
    thawed = [norm for epoch, groups, norm in norms.seen if epoch == 1]
    assert thawed and all(groups == 2 for epoch, groups, _ in norms.seen if epoch == 1)
    assert max(thawed) <= 1e-3 * (1 + 1e-5)  # the backbone's gradients are clipped with the head's


def test_finetune_function_gets_the_optimizer_configure_optimizers_returned(tmp_path):
    seen: list[Any] = []

    class Recording(LayerByLayer):
        def finetune_function(self, pl_module: Any, current_epoch: int, optimizer: Any) -> None:
            seen.append(type(optimizer))  # a script tests `isinstance(optimizer, torch.optim.SGD)`
            super().finetune_function(pl_module, current_epoch, optimizer)

    fit(tmp_path, [Recording()], 2, enable_checkpointing=False)
    assert seen == [torch.optim.SGD, torch.optim.SGD]
