"""ModelSummary: the layer table (counts checked by hand; they match Lightning 2.6's for these models) and its
place as a default callback of the Trainer."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from stoker import ModelSummary, Trainer
from stoker.callbacks.summary import readable_bytes, readable_count, summarize
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class Tied(nn.Module):
    """A frozen layer, a weight shared by two layers, a parameter on the root and a BatchNorm in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.dec = nn.Linear(8, 6)
        self.dec.weight.requires_grad_(False)
        self.head = nn.Linear(8, 6)
        self.head.weight = self.dec.weight
        self.scale = nn.Parameter(torch.ones(3))
        self.enc[1].eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        return self.dec(h) + self.head(h)


def test_counts_sizes_and_modes_by_hand():
    table = summarize(Tied())
    # enc: 6*8+8 + 2*8 (BN weight, bias) = 72; dec: 8*6+6 = 54 (48 frozen); head shares dec's weight: 6 new.
    assert [(r.name, r.type, r.params, r.trainable) for r in table.layers] == [
        ("enc", "Sequential", 72, 72), ("dec", "Linear", 54, 6), ("head", "Linear", 54, 6)]
    assert table.total_parameters == 72 + 54 + 6 + 3  # the shared weight once, the root's own 3
    assert table.trainable_parameters == table.total_parameters - 48
    assert table.other_parameters == 3
    assert table.total_bytes == 4 * table.total_parameters and table.model_size == 4 * 135 / 1e6
    assert (table.modules_in_train_mode, table.modules_in_eval_mode) == (5, 1)
    text = str(table)
    assert text.splitlines()[0].split() == ["|", "Name", "|", "Type", "|", "Params", "|", "Trainable", "|", "Size",
                                            "|", "Mode"]
    assert "other params" in text and "48        Non-trainable params" in text and "135       Total params" in text
    assert "0.001     Total estimated model params size (MB)" in text


def test_depth_selects_the_layers():
    model = Tied()
    assert [r.name for r in summarize(model, max_depth=2).layers] == ["enc", "enc.0", "enc.1", "enc.2", "dec", "head"]
    assert [r.name for r in summarize(model, max_depth=-1).layers] == ["enc", "enc.0", "enc.1", "enc.2", "dec", "head"]
    assert summarize(model, max_depth=0).layers == []
    deep = nn.Sequential(nn.Sequential(nn.Sequential(nn.Linear(2, 2))))
    assert [r.name for r in summarize(deep, max_depth=2).layers] == ["0", "0.0"]
    assert [r.name for r in summarize(deep, max_depth=-1).layers] == ["0", "0.0", "0.0.0"]
    assert summarize(deep, max_depth=2).other_parameters == 0  # nested rows are not counted twice


def test_sizes_follow_the_real_dtype():
    table = summarize(nn.Sequential(nn.Linear(10, 10)).to(torch.bfloat16))
    assert table.total_bytes == 2 * 110 and table.layers[0].bytes == 220


def test_example_input_array_gives_shapes_without_gradients_or_mode_changes():
    model = Tied()
    model.example_input_array = torch.zeros(5, 6)
    table = summarize(model)
    assert [(r.in_size, r.out_size) for r in table.layers] == [([5, 6], [5, 8]), ([5, 8], [5, 6]), ([5, 8], [5, 6])]
    assert "In sizes" in str(table) and "Out sizes" in str(table)
    assert model.training and not model.enc[1].training  # each module's mode restored
    assert all(p.grad is None for p in model.parameters())
    assert not model.enc[1].num_batches_tracked  # ran in eval mode: BatchNorm statistics untouched


def test_the_example_forward_counts_flops_per_layer():
    model = Tied()
    model.example_input_array = torch.zeros(5, 6)
    table = summarize(model)
    mm = torch.ops.aten.addmm  # a Linear: 2 * batch * in * out
    assert table.flop_counts["dec"] == {mm: 2 * 5 * 8 * 6} and table.flop_counts["head"] == {mm: 2 * 5 * 8 * 6}
    assert table.flop_counts["enc"][mm] == 2 * 5 * 6 * 8
    assert table.total_flops == sum(sum(c.values()) for c in table.flop_counts.values())
    assert summarize(Tied()).total_flops == 0  # no example input: nothing counted


def test_a_scripted_layer_has_no_shapes_and_does_not_stop_the_summary(tmp_path, capsys):
    class Partly(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(torch.jit.script(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 2))
            self.example_input_array = torch.zeros(3, 8)

    table = summarize(Partly(), max_depth=2)
    assert [(r.name, r.in_size) for r in table.layers] == [("net", [3, 8]), ("net.0", "?"), ("net.1", [3, 16]),
                                                            ("net.2", [3, 16])]
    trainer(tmp_path, max_epochs=1).fit(Partly(), loaders()[0])  # the default summary at fit start
    assert "RecursiveScriptModule" not in capsys.readouterr().out  # depth 1: `net` only


def test_lazy_layers_are_counted_after_the_example_forward_or_said_to_be_left_out():
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.warns(UserWarning, match="leaves out 2 parameter.*The total number of parameters detected may be"):
        table = summarize(model)
    assert table.total_parameters == 10 and [r.params for r in table.layers] == [0, 0, 10]
    model.example_input_array = torch.zeros(3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = summarize(model)  # the example forward gives the lazy layer its (5 -> 4) weights first
    assert table.total_parameters == 34 and [r.params for r in table.layers] == [24, 0, 10]
    assert table.layers[0].in_size == [3, 5] and table.other_parameters == 0


def test_no_example_forward_when_asked_not_to():
    model = Tied()
    model.example_input_array = torch.zeros(5, 6)
    calls = []
    model.enc.register_forward_hook(lambda *args: calls.append(1))
    table = summarize(model, example_forward=False)  # what ModelSummary asks for under FSDP (a collective forward)
    assert calls == [] and not table.has_shapes and "In sizes" not in str(table)


def test_readable_numbers():
    assert [readable_count(n) for n in (0, 5, 999, 1234, 132608, 2_000_000, 3 * 10**9)] == [
        "0", "5", "999", "1.2 K", "132 K", "2.0 M", "3.0 B"]
    assert [readable_bytes(n) for n in (528, 1500, 2_500_000)] == ["528 B", "1.5 KB", "2.5 MB"]


@pytest.mark.parametrize("bad", [-2, 1.0, True, "1"])
def test_bad_depth_is_refused(bad):
    with pytest.raises(ValueError, match=r"ModelSummary\(max_depth="):
        ModelSummary(max_depth=bad)


def test_the_default_prints_once_per_fit_with_the_run_settings(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2, accumulate=2)
    assert [type(c).__name__ for c in t.callbacks][0] == "ModelSummary"
    t.fit(Regressor(), *loaders())
    out = capsys.readouterr().out
    assert out.count("Total params") == 1 and out.count("| Name") == 1
    assert "0 | net  | Sequential | 178    | 178       | 712 B | train" in out  # make_mlp: 8*16+16 + 16*2+2
    assert "Device: cpu | processes: 1 | precision: fp32 | accumulation: 2 micro-batches per optimizer step" in out


def test_disabled_or_replaced(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, enable_model_summary=False)
    assert not any(isinstance(c, ModelSummary) for c in t.callbacks)
    t.fit(Regressor(), *loaders())
    assert "Total params" not in capsys.readouterr().out
    mine = ModelSummary(max_depth=2)
    t = trainer(tmp_path, max_epochs=1, callbacks=[mine], precision="bf16")
    assert [c for c in t.callbacks if isinstance(c, ModelSummary)] == [mine]
    t.fit(Regressor(), *loaders())
    out = capsys.readouterr().out
    assert "net.0" in out and "precision: bf16 | accumulation: 1 micro-batch per" in out
    assert mine.table is not None and mine.table.total_parameters == sum(p.numel() for p in Regressor().parameters())
    quiet = ModelSummary(max_depth=0)
    trainer(tmp_path, max_epochs=1, callbacks=[quiet]).fit(Regressor(), *loaders())
    assert "Total params" not in capsys.readouterr().out and quiet.table is None
