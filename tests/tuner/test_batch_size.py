"""Tuner.scale_batch_size: both searches find the largest batch size below a simulated out-of-memory threshold, the
size goes to the attribute the loader hooks read (module, hparams or data module), and the trials leave no trace."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker.trainer import TrainingModule
from stoker.trainer.datamodule import DataModule
from stoker.tuner import Tuner
from stoker.tuner.batch_size_scaling import is_oom_error
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import assert_same_weights, state_of


def _dataset(n: int = 256) -> TensorDataset:
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, x.sum(1, keepdim=True))


class Sized(TrainingModule):
    """Runs out of memory (``torch.OutOfMemoryError``) on any batch larger than ``fits``; records the sizes seen."""

    def __init__(self, batch_size: int | None = 2, fits: int = 10_000, n: int = 256) -> None:
        super().__init__()
        if batch_size is not None:
            self.batch_size = batch_size
        self.fits, self.n, self.seen = fits, n, []
        self.layer = torch.nn.Linear(4, 1)

    def _step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        self.seen.append(len(x))
        if len(x) > self.fits:
            raise torch.OutOfMemoryError(f"simulated: {len(x)} samples do not fit")
        return F.mse_loss(self.layer(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_dataset(self.n), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_dataset(self.n), batch_size=self.batch_size)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def test_power_doubles_until_out_of_memory_and_answers_the_last_size_that_fitted() -> None:
    module = Sized(fits=40)
    size = Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(module, mode="power", steps_per_trial=2)
    assert size == module.batch_size == 32
    assert sorted(set(module.seen)) == [2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize(("fits", "margin", "expected"), [(40, 0.0, 40), (40, 0.05, 38), (45, 0.0, 45), (1, 0.0, 1)])
def test_binsearch_narrows_to_the_largest_size_that_fits(fits: int, margin: float, expected: int) -> None:
    module = Sized(fits=fits, batch_size=8)
    size = Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(module, mode="binsearch", init_val=8, margin=margin,
                                                               steps_per_trial=1)
    assert size == module.batch_size == expected


def test_a_first_size_too_large_is_halved_until_it_fits() -> None:
    module = Sized(fits=100, n=1000)
    assert Tuner(quiet_trainer()).scale_batch_size(module, init_val=500, steps_per_trial=1) == 62  # 500, 250, 125


def test_the_search_stops_at_max_trials_max_val_and_the_dataset_length() -> None:
    tuner = Tuner(quiet_trainer())
    assert tuner.scale_batch_size(Sized(), init_val=2, max_trials=3, steps_per_trial=1) == 8
    assert tuner.scale_batch_size(Sized(), init_val=4, max_trials=0) == 4
    assert tuner.scale_batch_size(Sized(), max_val=24, steps_per_trial=1) == 24
    module = Sized(n=100)
    assert tuner.scale_batch_size(module, steps_per_trial=1) == 100 and max(module.seen) == 100


def test_weights_rng_step_and_trainer_are_restored() -> None:
    module, trainer = Sized(fits=40), quiet_trainer(max_epochs=1)
    trainer.fit(module)
    weights, step, rng = state_of(module), trainer.global_step, torch.get_rng_state()
    callbacks, loop = trainer.callbacks, trainer.fit_loop.state_dict()
    Tuner(trainer).scale_batch_size(module, mode="binsearch")
    assert_same_weights(module, weights, "after scale_batch_size")
    assert trainer.global_step == step == 128 and trainer.fit_loop.state_dict() == loop
    assert trainer.callbacks is callbacks and torch.equal(torch.get_rng_state(), rng)


def test_the_data_module_and_hparams_get_the_size_and_the_next_fit_uses_it() -> None:
    class Data(DataModule):
        def __init__(self, batch_size: int) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self) -> DataLoader:
            return DataLoader(_dataset(), batch_size=self.hparams.batch_size)

        val_dataloader = train_dataloader

    module, data = Sized(batch_size=None, fits=20), Data(batch_size=2)
    trainer = quiet_trainer(max_epochs=1)
    assert Tuner(trainer).scale_batch_size(module, datamodule=data, steps_per_trial=1) == 16
    assert data.hparams.batch_size == 16
    module.seen.clear()
    trainer.fit(module, datamodule=data)
    assert set(module.seen) == {16}


def test_validate_is_searched_with_its_own_loader() -> None:
    module = Sized(fits=48)
    assert Tuner(quiet_trainer()).scale_batch_size(module, method="validate", mode="binsearch", margin=0.0) == 48


def test_errors_other_than_out_of_memory_propagate_after_the_restore() -> None:
    class Broken(Sized):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if len(batch[0]) > 4:
                raise RuntimeError("a bug in training_step")
            return super().training_step(batch, batch_idx)

    module, trainer = Broken(), quiet_trainer()
    weights = state_of(module)
    with pytest.raises(RuntimeError, match="a bug"):
        Tuner(trainer).scale_batch_size(module)
    assert_same_weights(module, weights) and trainer.global_step == 0 and trainer.state.fn is None


def test_bad_arguments_are_refused_before_any_trial() -> None:
    module, tuner = Sized(), Tuner(quiet_trainer())
    with pytest.raises(ValueError, match="loader hooks"):
        tuner.scale_batch_size(module, train_dataloaders=module.train_dataloader())
    with pytest.raises(ValueError, match="'tiny'"):
        tuner.scale_batch_size(module, mode="tiny")
    with pytest.raises(ValueError, match="'bs'"):
        tuner.scale_batch_size(module, batch_arg_name="bs")
    with pytest.raises(ValueError, match="'dataloaders'|dataloaders="):
        tuner.scale_batch_size(module, dataloaders=module.val_dataloader())
    with pytest.raises(ValueError, match="'tune'"):
        tuner.scale_batch_size(module, method="tune")
    with pytest.raises(ValueError, match="margin=1.5"):
        tuner.scale_batch_size(module, margin=1.5)
    assert module.seen == []


def test_what_counts_as_out_of_memory() -> None:
    assert is_oom_error(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom_error(RuntimeError("CUDA error: out of memory"))
    assert is_oom_error(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert not is_oom_error(RuntimeError("shape mismatch"))
    assert not is_oom_error(ValueError("out of memory"))


def test_batch_size_finder_callback_searches_as_the_fit_sets_up_and_the_fit_uses_the_size() -> None:
    from stoker.callbacks import BatchSizeFinder

    finder = BatchSizeFinder(mode="binsearch", steps_per_trial=1, margin=0.0)
    module, trainer = Sized(fits=40), quiet_trainer(max_epochs=1, callbacks=[finder])
    trainer.fit(module)
    assert finder.optimal_batch_size == module.batch_size == 40
    assert trainer.global_step == 7 and trainer.callbacks[0] is finder  # 256 samples in batches of 40
    with pytest.raises(ValueError, match="already configured with a `BatchSizeFinder`"):
        Tuner(trainer).scale_batch_size(module)


@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_the_trainer_keeps_train_and_val_loaders_of_the_size_found(mode: str) -> None:
    module = Sized(fits=40)
    trainer = quiet_trainer(max_epochs=1)
    size = Tuner(trainer).scale_batch_size(module, mode=mode, steps_per_trial=1, max_trials=4)
    assert trainer.train_dataloader.batch_size == size
    assert trainer.val_dataloaders.batch_size == size  # also after a final trial that trains nothing
