"""Lightning's ``utilities.model_summary``: the summary object with Lightning's names, over the callback's table."""

from __future__ import annotations

import torch
from torch import nn

from stoker import TrainingModule
from stoker.callbacks.summary import summarize as table_of
from stoker.utilities.model_summary import (LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, UNKNOWN_SIZE, ModelSummary,
                                            get_human_readable_count, summarize)


class Net(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.unused = nn.Linear(3, 3)  # never called: its shapes stay unknown
        self.scale = nn.Parameter(torch.ones(1))  # the root's own parameter
        self.example_input_array = torch.zeros(5, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) * self.scale


def test_the_summary_object_has_lightnings_names_and_the_tables_numbers():
    net = Net()
    net.unused.eval()
    summary = ModelSummary(net, max_depth=1)
    assert summary.layer_names == ["encoder", "head", "unused"]
    assert summary.layer_types == ["Sequential", "Linear", "Linear"]
    assert summary.param_nums == [40, 18, 12] and summary.total_layer_params == 70
    assert summary.total_parameters == 71 == summary.trainable_parameters  # `scale` too
    assert summary.in_sizes == [[5, 4], [5, 8], UNKNOWN_SIZE] and summary.out_sizes == [[5, 8], [5, 2], UNKNOWN_SIZE]
    assert summary.training_modes == [True, True, False]
    assert summary.total_training_modes == {"train": 4, "eval": 1}
    assert summary.total_flops == sum(sum(c.values()) for c in summary.flop_counts.values()) > 0
    assert [name for name, _ in summary.named_modules] == summary.layer_names
    assert summary.model_size == 71 * 4 / 1e6
    text = str(summary)
    assert text == str(table_of(net, 1)) == repr(summary)
    assert LEFTOVER_PARAMS_NAME in text and NOT_APPLICABLE in text
    net.head.eval()
    assert summary.total_training_modes == {"train": 3, "eval": 2}  # read now, as Lightning's


def test_depth_summarize_and_the_count_format():
    deep = summarize(Net(), max_depth=-1)
    assert deep.layer_names == ["encoder", "encoder.0", "encoder.1", "head", "unused"]
    assert isinstance(deep, ModelSummary) and summarize(Net(), max_depth=0).layer_names == []
    assert [get_human_readable_count(n) for n in (5, 1234, 132608, 2_500_000)] == ["5", "1.2 K", "132 K", "2.5 M"]


def test_lightning_module_paths():
    import stoker.utilities.model_summary.model_summary as path

    assert path.ModelSummary is ModelSummary and path.UNKNOWN_SIZE == "?"


class AnyInput(TrainingModule):
    """A layer that takes any arguments, fed the example input as it is."""

    def __init__(self, example) -> None:
        super().__init__()
        self.layer = Passes()
        self.example_input_array = example

    def forward(self, *args, **kwargs):
        return self.layer(*args, **kwargs)


class Passes(nn.Module):
    def forward(self, *args, **kwargs):
        return None


def test_an_input_with_no_size_shows_as_unknown_as_in_lightning():
    # no argument at all ([] is called with none), a 0-dim tensor: "?", not an empty list
    for example in ([], torch.tensor(0.0)):
        assert summarize(AnyInput(example)).in_sizes == [UNKNOWN_SIZE]
    assert summarize(AnyInput(torch.zeros(2, 3))).in_sizes == [[2, 3]]
    assert summarize(AnyInput((torch.zeros(2, 3), torch.zeros(4, 5)))).in_sizes == [[[2, 3], [4, 5]]]
