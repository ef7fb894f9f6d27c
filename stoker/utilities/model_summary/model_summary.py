"""Lightning's ``utilities.model_summary.model_summary`` names over stoker's `SummaryTable`.

``ModelSummary(model, max_depth=1)`` here is the summary object (``print(ModelSummary(model, max_depth=-1))``), not
the callback of the same name (``stoker.callbacks.ModelSummary``); it is the callback's table with Lightning's
attribute names (``total_flops`` and ``flop_counts`` are counted in the example forward pass, as Lightning's; the
table has no FLOPs column).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from stoker.callbacks.summary import (LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, UNKNOWN_SIZE, SummaryTable,
                                      readable_count)

__all__ = ["LEFTOVER_PARAMS_NAME", "NOT_APPLICABLE", "UNKNOWN_SIZE", "ModelSummary", "get_human_readable_count",
           "summarize"]

get_human_readable_count = readable_count


class ModelSummary(SummaryTable):
    """The summary of ``model``'s layers to ``max_depth`` (-1: all), with the input and output shapes when it has an
    ``example_input_array``; ``str()`` is the table the Trainer prints.

    Example:
        >>> summary = ModelSummary(nn.Sequential(nn.Linear(4, 3), nn.ReLU()))
        >>> summary.layer_names, summary.param_nums, summary.total_parameters
        (['0', '1'], [15, 0], 15)
    """

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        super().__init__(model, max_depth)

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        return self.named_layers()

    @property
    def layer_names(self) -> list[str]:
        return [row.name for row in self.layers]

    @property
    def layer_types(self) -> list[str]:
        return [row.type for row in self.layers]

    @property
    def in_sizes(self) -> list[Any]:
        return [row.in_size for row in self.layers]

    @property
    def out_sizes(self) -> list[Any]:
        return [row.out_size for row in self.layers]

    @property
    def param_nums(self) -> list[int]:
        return [row.params for row in self.layers]

    @property
    def training_modes(self) -> list[bool | None]:
        return [row.training for row in self.layers]

    @property
    def total_training_modes(self) -> dict[str, int]:
        """The sub-modules (the root aside) in each mode now."""
        modes = [m.training for m in list(self.module.modules())[1:]]
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """``ModelSummary(lightning_module, max_depth)``."""
    return ModelSummary(lightning_module, max_depth)
