"""ModelPruning in real fits: against a hand-written loop that prunes with torch, resumed exactly, its checkpoints,
its log, and bad arguments."""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune

from stoker import Callback, ModelCheckpoint, TrainingModule, read_checkpoint
from stoker.callbacks import ModelPruning
from tests.callbacks.modules import SaveAt, loaders, trainer
from tests.helpers.weights import assert_same_weights, state_of


class Net(TrainingModule):
    """Two linear layers; SGD with momentum and weight decay (which also moves entries the masks hide)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)


def targets(module: Net) -> list[tuple[nn.Module, str]]:
    """The default targets, in ModelPruning's order: every layer's weight, then every layer's bias."""
    return [(module.body[0], "weight"), (module.body[2], "weight"), (module.body[0], "bias"), (module.body[2], "bias")]


def plain_loop(epochs: int, amount: float, global_: bool, lottery: bool, permanent: bool) -> Net:
    """The same training by hand, pruning with torch at each epoch's end."""
    module = Net()
    initial = [getattr(m, n).detach().clone() for m, n in targets(module)]
    optimizer = module.configure_optimizers()
    train = loaders(shuffle=False)[0]
    for _ in range(epochs):
        for batch in train:
            loss = module.training_step(batch, 0)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if global_:
            scores = {(m, n): getattr(m, n + "_orig", getattr(m, n)).detach() for m, n in targets(module)}
            prune.global_unstructured(targets(module), pruning_method=prune.L1Unstructured, amount=amount,
                                      importance_scores=scores)
        else:  # ranked by the current values (torch's default: those of the last forward, before the last step)
            for m, n in targets(module):
                prune.l1_unstructured(m, n, amount=amount, importance_scores=getattr(m, n + "_orig", getattr(m, n)))
        if lottery:
            with torch.no_grad():
                for (m, n), start in zip(targets(module), initial):
                    getattr(m, n + "_orig").copy_(start)
    if permanent:
        for m, n in targets(module):
            prune.remove(m, n)
    return module


def fit(root: Any, callbacks: list[Callback], epochs: int = 3, shuffle: bool = True, ckpt: str | None = None,
        val: bool = False, **kw: Any) -> Net:
    module = Net()
    train, val_loader = loaders(shuffle=shuffle)
    kw.setdefault("enable_checkpointing", False)
    trainer(root, max_epochs=epochs, callbacks=callbacks, **kw).fit(
        module, train, val_loader if val else None, ckpt_path=ckpt)
    return module


@pytest.mark.parametrize("global_", [True, False])
@pytest.mark.parametrize("lottery", [True, False])
def test_a_fit_prunes_as_a_hand_written_loop_does(tmp_path, global_, lottery):
    pruning = ModelPruning("l1_unstructured", amount=0.25, use_global_unstructured=global_,
                           use_lottery_ticket_hypothesis=lottery, make_pruning_permanent=True)
    got = fit(tmp_path, [pruning], epochs=3, shuffle=False)
    expected = plain_loop(3, 0.25, global_, lottery, permanent=True)
    assert not hasattr(got.body[0], "weight_orig") and isinstance(got.body[0].weight, nn.Parameter)
    assert_same_weights(state_of(got), state_of(expected), "pruned fit vs hand-written loop")
    zeros = int((got.body[0].weight == 0).sum() + (got.body[2].weight == 0).sum())
    assert zeros > 0


def test_the_mask_stays_on_while_training_and_comes_off_at_the_end(tmp_path):
    seen: list[dict[str, bool]] = []

    class Look(Callback):
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            layer = module.body[0]
            seen.append({"pruned": hasattr(layer, "weight_orig"),
                         "zeros_kept": bool(((layer.weight_mask == 0) <= (layer.weight == 0)).all())
                         if hasattr(layer, "weight_mask") else True})

    module = fit(tmp_path, [ModelPruning("random_unstructured", amount=0.5, make_pruning_permanent=False), Look()])
    assert [s["pruned"] for s in seen] == [False, True, True] and all(s["zeros_kept"] for s in seen)
    assert hasattr(module.body[0], "weight_orig")  # make_pruning_permanent=False keeps the re-parametrization


def test_schedules_choose_the_epochs_and_amounts(tmp_path, caplog):
    pruning = ModelPruning("l1_unstructured", amount=lambda epoch: [0.5, 0, 0.5][epoch],
                           apply_pruning=lambda epoch: epoch != 2, verbose=1)
    with caplog.at_level(logging.INFO, logger="stoker.callbacks.pruning"):
        module = fit(tmp_path, [pruning])
    lines = [r.getMessage() for r in caplog.records if r.name == "stoker.callbacks.pruning"]
    assert lines == ["Applied `L1Unstructured`. Pruned: 0/178 (0.00%) -> 89/178 (50.00%)"]
    zeros = sum(int((p == 0).sum()) for p in module.parameters())
    assert zeros == 89


def test_verbose_2_reports_each_parameter(tmp_path, caplog):
    pruning = ModelPruning("l1_unstructured", parameters_to_prune=[], amount=2, use_global_unstructured=False,
                           parameter_names=["bias"], verbose=2)
    with caplog.at_level(logging.INFO, logger="stoker.callbacks.pruning"):
        fit(tmp_path, [pruning], epochs=1)
    lines = [r.getMessage() for r in caplog.records if r.name == "stoker.callbacks.pruning"]
    assert lines[0] == "Applied `l1_unstructured`. Pruned: 0/18 (0.00%) -> 4/18 (22.22%)"
    assert lines[1:] == [
        ("Applied `l1_unstructured` to `Linear(in_features=8, out_features=16, bias=True).bias` with amount=2. "
         "Pruned: 0 (0.00%) -> 2 (12.50%)"),
        ("Applied `l1_unstructured` to `Linear(in_features=16, out_features=2, bias=True).bias` with amount=2. "
         "Pruned: 0 (0.00%) -> 2 (100.00%)")]


class LastEpochState(Callback):
    """The module's state dict at the last epoch's end, before ``on_train_end`` may remove the re-parametrization:
    ``p_orig`` holds the entries the mask hides (weight decay moves them), which a resume must restore too."""

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.state = state_of(module)


@pytest.mark.parametrize(("method", "options"), [
    ("l1_unstructured", {"make_pruning_permanent": True}),
    ("l1_unstructured", {"make_pruning_permanent": True, "use_lottery_ticket_hypothesis": False}),
    ("l1_unstructured", {"make_pruning_permanent": False}),
    ("random_unstructured", {"make_pruning_permanent": True, "use_global_unstructured": False}),
    ("ln_structured", {"make_pruning_permanent": False, "use_global_unstructured": False, "pruning_dim": 0,
                       "pruning_norm": 2, "parameter_names": ["weight"]}),
    ("l1_unstructured", {"make_pruning_permanent": True, "resample_parameters": True}),
    ("l1_unstructured", {"make_pruning_permanent": True, "prune_on_train_epoch_end": False}),
    ("l1_unstructured", {"make_pruning_permanent": True, "accumulate": 2}),
    ("l1_unstructured", {"make_pruning_permanent": False, "accumulate": 2}),
])
def test_a_resumed_fit_ends_bit_identical(tmp_path, method, options):
    """Checkpoints inside the first epoch (nothing pruned yet), at an epoch's last batch and inside a later epoch
    (with ``accumulate=2``, batches 3 and 9 are inside a window: its gradients are saved too)."""
    run = {"accumulate": options.pop("accumulate", 1), "val": not options.get("prune_on_train_epoch_end", True)}

    def callback() -> ModelPruning:
        return ModelPruning(method, amount=0.3, **options)

    saves, whole_last = str(tmp_path / "saves"), LastEpochState()
    whole = fit(tmp_path / "whole", [callback(), whole_last, SaveAt(saves, {3, 8, 9})], epochs=4, **run)
    for batch in (3, 8, 9):
        last = LastEpochState()
        resumed = fit(tmp_path / f"resumed{batch}", [callback(), last], epochs=4,
                      ckpt=os.path.join(saves, f"batch{batch}"), **run)
        assert_same_weights(state_of(resumed), state_of(whole), f"resumed from batch {batch}")
        assert_same_weights(last.state, whole_last.state, f"resumed from batch {batch}, before the end of training")


def test_the_lottery_ticket_starts_from_the_saved_values_whatever_the_new_module_holds(tmp_path):
    saves = str(tmp_path / "saves")
    whole = fit(tmp_path / "whole", [ModelPruning("l1_unstructured", amount=0.3), SaveAt(saves, {6})], epochs=3)
    other = Net()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)  # another initialisation: the lottery ticket must still reset to the first run's
    train = loaders()[0]
    trainer(tmp_path / "resumed", max_epochs=3, callbacks=[ModelPruning("l1_unstructured", amount=0.3)],
            enable_checkpointing=False).fit(other, train, ckpt_path=os.path.join(saves, "batch6"))
    assert_same_weights(state_of(other), state_of(whole), "resumed into a differently initialised module")


@pytest.mark.parametrize("permanent", [True, False])
def test_checkpoints_hold_the_pruned_weights_or_the_pair(tmp_path, permanent):
    pruning = ModelPruning("l1_unstructured", amount=0.5, make_pruning_permanent=permanent)
    checkpoint = ModelCheckpoint(dirpath=str(tmp_path / "ck"), save_last=True)
    module = fit(tmp_path, [pruning, checkpoint], epochs=2, enable_checkpointing=True)
    saved = read_checkpoint(os.path.join(tmp_path, "ck", "last.ckpt"))["state_dict"]
    if permanent:
        assert sorted(saved) == ["body.0.bias", "body.0.weight", "body.2.bias", "body.2.weight"]
        assert_same_weights(dict(sorted(saved.items())), dict(sorted(state_of(module).items())),
                            "the last checkpoint's weights")  # saved before on_train_end made the pruning permanent
        loaded = Net.load_from_checkpoint(os.path.join(tmp_path, "ck", "last.ckpt"))
        assert not hasattr(loaded.body[0], "weight_orig")
        assert_same_weights(state_of(loaded), state_of(module), "load_from_checkpoint")
    else:
        assert "body.0.weight_orig" in saved and "body.0.weight_mask" in saved and "body.0.weight" not in saved
        assert_same_weights(dict(sorted(saved.items())), dict(sorted(state_of(module).items())),
                            "the last checkpoint's weights")


@pytest.mark.parametrize("permanent", [True, False])
def test_the_hooks_view_shows_what_is_saved_and_the_module_stays_pruned(tmp_path, permanent):
    seen: dict[str, list] = {"view": [], "live": []}

    class Look(Callback):
        def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
            seen["view"].append(sorted(k for k in checkpoint["state_dict"] if k.startswith("body.0.weight")))

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            seen["live"].append(sorted(k for k in module.state_dict() if k.startswith("body.0.weight")))

    pruning = ModelPruning("l1_unstructured", amount=0.5, make_pruning_permanent=permanent)
    fit(tmp_path, [pruning, Look(), SaveAt(str(tmp_path / "saves"), {6})], epochs=2)
    pair = ["body.0.weight_mask", "body.0.weight_orig"]
    assert seen["view"] == [["body.0.weight"] if permanent else pair]
    assert seen["live"] == [["body.0.weight"]] * 4 + [pair] * 4  # pruned after epoch 0; a save changes nothing


def test_two_callbacks_prune_the_same_parameters_in_turn_and_resume(tmp_path):
    def callbacks() -> list[Callback]:
        return [ModelPruning("l1_unstructured", amount=0.5, apply_pruning=lambda e: e % 2 == 0),
                ModelPruning("random_unstructured", amount=0.25, apply_pruning=lambda e: e % 2 == 1,
                             make_pruning_permanent=False)]

    saves = str(tmp_path / "saves")
    whole = fit(tmp_path / "whole", [*callbacks(), SaveAt(saves, {10})], epochs=4)
    resumed = fit(tmp_path / "resumed", callbacks(), epochs=4, ckpt=os.path.join(saves, "batch10"))
    assert_same_weights(state_of(resumed), state_of(whole), "two ModelPruning callbacks, resumed")


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match=r"chocolate isn't in \('weight', 'bias'\)"):
        ModelPruning("l1_unstructured", parameter_names=["chocolate"])
    with pytest.raises(ValueError, match=r"expected to be a str in \["):
        ModelPruning("l2_magic")
    with pytest.raises(TypeError, match="pass the class, not an instance"):
        ModelPruning(prune.L1Unstructured(amount=0.1))
    with pytest.raises(TypeError, match="BasePruningMethod subclass"):
        ModelPruning({})
    with pytest.raises(ValueError, match="pruning_dim should be provided"):
        ModelPruning("random_structured", use_global_unstructured=False)
    with pytest.raises(ValueError, match="`pruning_norm` should be provided"):
        ModelPruning("ln_structured", pruning_dim=0, use_global_unstructured=False)
    with pytest.raises(ValueError, match="only an 'unstructured' method"):
        ModelPruning("ln_structured", pruning_dim=0, pruning_norm=1)
    with pytest.raises(ValueError, match="only supported with use_global_unstructured=True"):
        ModelPruning(prune.L1Unstructured, use_global_unstructured=False)
    with pytest.raises(ValueError, match=r"must be any of \(0, 1, 2\)"):
        ModelPruning("l1_unstructured", verbose=3)
    with pytest.raises(TypeError, match="amount"):
        ModelPruning("l1_unstructured", amount="half")
    with pytest.raises(ValueError, match="between 0 and 1"):
        ModelPruning("l1_unstructured", amount=1.5)
    with pytest.raises(TypeError, match="apply_pruning"):
        ModelPruning("l1_unstructured", apply_pruning="yes")
    with pytest.raises(TypeError, match="parameters_to_prune"):
        ModelPruning("l1_unstructured", parameters_to_prune=[nn.Linear(2, 2)])
    ModelPruning("l1_unstructured", parameters_to_prune=None)  # None: every layer's weight and bias, as ()


def test_bad_targets_are_refused_when_the_fit_starts(tmp_path):
    with pytest.raises(ValueError, match="don't exist in the model"):
        fit(tmp_path / "a", [ModelPruning("l1_unstructured", parameters_to_prune=[(nn.Linear(2, 2), "weight")])])
    with pytest.raises(ValueError, match=r"needs parameters of 2 or more dimensions; \['body.0.bias'"):
        fit(tmp_path / "b", [ModelPruning("ln_structured", pruning_dim=0, pruning_norm=1,
                                          use_global_unstructured=False)])
    sharded = SimpleNamespace(accelerator=SimpleNamespace(strategy=SimpleNamespace(shards_parameters=True)))
    with pytest.raises(ValueError, match="FSDP"):
        ModelPruning("l1_unstructured").setup(sharded, Net(), "fit")


def test_default_targets_are_layer_parameters_only():
    class WithExtras(Net):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))  # the module's own parameter: not a layer's
            self.body[0].flag = True  # an attribute that is not a parameter

    module = WithExtras()
    found = ModelPruning.sanitize_parameters_to_prune(module, (), ["weight", "bias"])
    assert found == targets(module)


def test_lightning_module_path():
    from stoker.callbacks.pruning import ModelPruning as FromPath

    assert FromPath is ModelPruning
