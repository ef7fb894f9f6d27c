"""Which indices the steps and batch hooks get: ``batch_idx`` may be left out of a step's signature, and a
``dataloader_idx`` that cannot be served is a ``RuntimeError`` naming the method, before any batch runs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer as bare


class NoIndex(Regressor):
    """Every step written without ``batch_idx``; records what each was given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = {}

    def _count(self, name: str, batch: Any) -> torch.Tensor:
        self.seen[name] = self.seen.get(name, 0) + 1
        x, y = batch
        return F.mse_loss(self(x), y)

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self._count("train", batch)

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        self._count("validate", batch)

    def test_step(self, batch: Any) -> None:  # type: ignore[override]
        self._count("test", batch)

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self(batch[0])


def test_steps_without_batch_idx_are_called_with_the_batch_alone() -> None:
    module = NoIndex()
    data = make_regression_data(n=32)
    trainer = bare(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(module, make_loader(data), make_loader(data))
    trainer.test(module, make_loader(data))
    predictions = trainer.predict(module, make_loader(data))
    assert module.seen == {"train": 4, "validate": 4, "test": 4}
    assert trainer.global_step == 4 and len(predictions) == 4 and predictions[0].shape[0] == 8


def test_a_step_without_batch_idx_still_gets_the_loader_index_of_several_loaders() -> None:
    class TwoLoaders(NoIndex):
        def validation_step(self, batch: Any, dataloader_idx: int = 0) -> None:  # type: ignore[override]
            self._count(f"validate{dataloader_idx}", batch)

    module = TwoLoaders()
    data = make_regression_data(n=16)
    bare().validate(module, [make_loader(data), make_loader(data, batch_size=4)])
    assert module.seen == {"validate0": 2, "validate1": 4}


class RequiredIndex(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int) -> None:  # type: ignore[override]
        super().validation_step(batch, batch_idx)


class IndexInEndHook(Regressor):
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        pass


class NoLoaderIndex(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:  # type: ignore[override]
        super().validation_step(batch, batch_idx)

    def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:  # type: ignore[override]
        pass


@pytest.mark.parametrize("module, loaders, words", [
    (RequiredIndex(), 1, r"single loader.*RequiredIndex.validation_step\(\).*`dataloader_idx`.*no default"),
    (IndexInEndHook(), 1, "single loader.*IndexInEndHook.on_validation_batch_end"),
    (Regressor(), 2, "several loaders.*Regressor.validation_step"),
    (NoLoaderIndex(), 2, "several loaders.*NoLoaderIndex.on_validation_batch_start"),
])
def test_a_loader_index_the_signature_cannot_take_is_an_error_before_any_batch(module: Regressor, loaders: int,
                                                                                 words: str) -> None:
    seen: list[int] = []
    module.on_validation_start = lambda: seen.append(1)  # type: ignore[method-assign]
    data = make_regression_data(n=16)
    with pytest.raises(RuntimeError, match=words):
        bare().validate(module, [make_loader(data) for _ in range(loaders)])
    assert seen == []  # checked before the stage's hooks


def test_a_loader_index_with_a_default_or_taken_by_star_args_is_fine() -> None:
    class Defaulted(Regressor):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            super().validation_step(batch, batch_idx)

    class StarArgs(Regressor):
        def validation_step(self, batch: Any, *args: Any) -> None:  # type: ignore[override]
            super().validation_step(batch, args[0])

    data = make_regression_data(n=16)
    for module in (Defaulted(), StarArgs()):
        for count in (1, 2):
            results = bare().validate(module, [make_loader(data) for _ in range(count)])
            assert len(results) == count


def test_a_training_step_written_for_lightning_1s_optimizer_idx_fails_at_once() -> None:
    class OldStyle(Regressor):
        def training_step(self, batch: Any, batch_idx: int, optimizer_idx: int) -> torch.Tensor:  # type: ignore
            return super().training_step(batch, batch_idx)

    class Defaulted(Regressor):  # a default means it is never needed: fine
        def training_step(self, batch: Any, batch_idx: int, optimizer_idx: int = 0) -> torch.Tensor:  # type: ignore
            return super().training_step(batch, batch_idx)

    loader = make_loader(make_regression_data(n=16))
    with pytest.raises(RuntimeError, match=r"OldStyle.training_step\(\) takes `optimizer_idx`.*Remove the "
                                           r"`optimizer_idx` argument.*automatic_optimization = False"):
        bare(max_steps=1).fit(OldStyle(), loader)
    bare(max_steps=1).fit(Defaulted(), loader)
