"""Prepared loaders move the global RNG exactly as the user's own ``DataLoader`` does (GlobalDraws in
stoker/accelerator/data_loader.py), so models with dropout train to the same weights as a plain PyTorch loop in
every epoch, and a resumed run still continues the uninterrupted one exactly."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from stoker import Accelerator
from stoker.utils import DataLoaderConfiguration

DATA = TensorDataset(torch.arange(48.0).reshape(12, 4) / 48, torch.arange(12.0).reshape(12, 1) / 12)


def _states_per_epoch(make_loader, prepare: bool, epochs: int = 3, **accelerator_kwargs) -> list[torch.Tensor]:
    """The global RNG state after each epoch of iterating ``make_loader()`` (prepared or not)."""
    torch.manual_seed(0)
    loader = make_loader()
    if prepare:
        loader = Accelerator(cpu=True, **accelerator_kwargs).prepare(loader)
    states = []
    for _ in range(epochs):
        for _ in loader:
            pass
        states.append(torch.get_rng_state())
    return states


@pytest.mark.parametrize("kwargs", [
    {},                                                   # one base-seed draw per epoch
    {"shuffle": True},                                    # and the RandomSampler's seed
    {"num_workers": 2},                                   # workers: the same draw
    {"num_workers": 2, "persistent_workers": True},       # persistent workers: the base seed once only
    {"generator": torch.Generator().manual_seed(3)},      # a loader with its own generator: none
    {"sampler": RandomSampler(DATA, generator=torch.Generator().manual_seed(3))},  # a seeded sampler: base only
])
def test_each_epoch_draws_what_the_plain_loader_draws(kwargs) -> None:
    def make():
        return DataLoader(DATA, batch_size=4, **kwargs)

    plain, prepared = _states_per_epoch(make, False), _states_per_epoch(make, True)
    for epoch, (a, b) in enumerate(zip(plain, prepared)):
        assert torch.equal(a, b), f"the global RNG differs after epoch {epoch}"


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(torch.arange(10.0))


@pytest.mark.parametrize("stateful", [False, True])
def test_iterable_datasets_draw_as_plain_and_a_continued_epoch_draws_nothing(stateful: bool) -> None:
    def make():
        return DataLoader(Stream(), batch_size=4)

    config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
    plain = _states_per_epoch(make, False)
    assert all(torch.equal(a, b) for a, b in zip(plain, _states_per_epoch(make, True, dataloader_config=config)))
    if stateful:  # torchdata keeps a stream's position: a loop left early is continued by the next one
        loader = Accelerator(cpu=True, dataloader_config=config).prepare(make())
        for _ in loader:
            break
        state = torch.get_rng_state()
        assert len(list(loader)) == 2  # the rest of the epoch (3 batches of 10 items in all)
        assert torch.equal(torch.get_rng_state(), state)


def test_with_data_seed_prepare_draws_nothing_and_epochs_draw_as_plain() -> None:
    def make():
        return DataLoader(DATA, batch_size=4, shuffle=True)

    config = DataLoaderConfiguration(data_seed=1234)
    plain = _states_per_epoch(make, False)
    prepared = _states_per_epoch(make, True, dataloader_config=config)
    assert all(torch.equal(a, b) for a, b in zip(plain, prepared))


def _train(prepared: bool, epochs: int = 3, shuffle: bool = False, **accelerator_kwargs) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(DATA, batch_size=4, shuffle=shuffle)
    val = DataLoader(DATA, batch_size=6)
    accelerator = Accelerator(cpu=True, **accelerator_kwargs)
    if prepared:
        model, optimizer, loader, val = accelerator.prepare(model, optimizer, loader, val)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss) if prepared else loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        with torch.no_grad():
            for x, _ in val:
                model(x)
    return [p.detach().clone() for p in model.parameters()]


def test_dropout_model_matches_the_plain_loop_in_every_epoch() -> None:
    for a, b in zip(_train(False), _train(True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_shuffled_with_torchs_own_sampler_matches_the_plain_loop_too() -> None:
    """use_seedable_sampler=False keeps the user's RandomSampler (Accelerate's default): its order, and with the
    loader's base-seed draws every dropout mask, are the plain loop's (mid-epoch resume cannot replay it then)."""
    config = DataLoaderConfiguration(use_seedable_sampler=False)
    for a, b in zip(_train(False, shuffle=True), _train(True, shuffle=True, dataloader_config=config)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("shuffle", [False, True])
def test_resumed_mid_epoch_with_dropout_continues_exactly(tmp_path, shuffle: bool) -> None:
    def run(stop_at: int | None, resume: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        # Loader positions are part of save_state with use_stateful_dataloader (as in Accelerate).
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        loader = DataLoader(DATA, batch_size=4, shuffle=shuffle)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        if resume:
            accelerator.load_state(str(tmp_path / "state"))
        step = 0
        while loader.epoch < 3:  # the loader's epoch counts finished epochs (a resumed one continues its epoch)
            for x, y in loader:
                accelerator.backward(F.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
                step += 1
                if stop_at is not None and step == stop_at:
                    accelerator.save_state(str(tmp_path / "state"))
                    return []
        return [p.detach().clone() for p in model.parameters()]

    whole = run(None, False)
    run(5, False)  # saved after the second batch of the second epoch (3 batches per epoch)
    resumed = run(None, True)
    for a, b in zip(whole, resumed):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
