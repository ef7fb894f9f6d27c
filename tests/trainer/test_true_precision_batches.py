"""True precisions (``bf16-true``, ``16-true``, ``64-true``) convert each batch's floating-point tensors to the
weights' dtype before the step, as Lightning's loops do: a step that calls its layers directly, not through
``forward``, used to fail with "mat1 and mat2 must have the same dtype"."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import DataModule, TrainingModule
from tests.helpers.trainers import quiet_trainer


def data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True), torch.arange(16)), batch_size=4)


class Direct(TrainingModule):
    """Calls its layer directly in every step; records the dtypes each hook and step saw."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[tuple[str, torch.dtype, torch.dtype]] = []

    def _loss(self, where: str, batch: Any) -> torch.Tensor:
        x, y, index = batch
        self.seen.append((where, x.dtype, index.dtype))
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss("train", batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._loss("val", batch)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(("predict", batch[0].dtype, batch[2].dtype))
        return self.layer(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("precision, dtype", [("bf16-true", torch.bfloat16), ("64-true", torch.float64),
                                              ("16-true", torch.float16)])
def test_a_step_that_calls_its_layers_directly_gets_the_batch_in_the_weights_dtype(precision, dtype) -> None:
    module = Direct()
    trainer = quiet_trainer(max_epochs=1, precision=precision)
    trainer.fit(module, data(), data())
    predictions = trainer.predict(module, data())
    assert module.layer.weight.dtype == dtype and predictions[0].dtype == dtype
    assert {where for where, _, _ in module.seen} == {"train", "val", "predict"}
    assert all(x == dtype and index == torch.int64 for _, x, index in module.seen)  # integers stay integers


def test_the_transfer_hooks_see_the_converted_batch_first_and_mixed_precision_converts_nothing() -> None:
    class Hooked(DataModule):
        def __init__(self) -> None:
            super().__init__()
            self.before: list[torch.dtype] = []

        def train_dataloader(self) -> DataLoader:
            return data()

        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            self.before.append(batch[0].dtype)
            return batch

    hooked = Hooked()
    quiet_trainer(max_epochs=1, precision="64-true").fit(Direct(), datamodule=hooked)
    assert hooked.before == [torch.float64] * 4  # Lightning's order: converted, then the hooks
    mixed = Direct()
    quiet_trainer(max_epochs=1, precision="bf16-mixed").fit(mixed, data())
    assert all(x == torch.float32 for _, x, _ in mixed.seen)  # autocast computes in bf16; the data stays float32


def test_tensors_a_step_creates_without_a_dtype_take_the_weights_dtype_and_the_default_comes_back() -> None:
    """Lightning sets the default dtype around the steps of a true precision: ``torch.ones(n, 1)`` in a step is
    bf16 there, so concatenating it with the batch keeps the computation in bf16."""

    class Padding(Direct):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(5, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, _ = batch
            padded = torch.cat([x, torch.ones(x.shape[0], 1)], dim=1)
            self.seen.append(("train", padded.dtype, torch.tensor(0.5).dtype))
            return torch.nn.functional.mse_loss(self.layer(padded), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.seen.append(("val", torch.zeros(1).dtype, batch[0].dtype))

    module = Padding()
    quiet_trainer(max_epochs=1, precision="bf16-true").fit(module, data(), data())
    assert module.seen and all(a == b == torch.bfloat16 for _, a, b in module.seen)
    assert torch.get_default_dtype() == torch.float32
