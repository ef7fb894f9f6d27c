"""DataLoaderConfiguration's Accelerate fields (dispatch_batches, data_seed, non_blocking) and the CUDA input path.

No GPU is needed: the decision is a function of the device (``transfer_settings``), and ``prepare_data_loader``
is given a CUDA device object, which exists without CUDA, to check what the rebuilt loader would do there.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Accelerator, DataLoaderConfiguration
from stoker.accelerator.data.prepare import prepare_data_loader, transfer_settings


def _order(accelerator: Accelerator) -> list[list[int]]:
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(12)), batch_size=3, shuffle=True))
    return [b[0].tolist() for _ in range(2) for b in loader]


def test_configuration_accepts_accelerates_data_fields() -> None:
    config = DataLoaderConfiguration(dispatch_batches=True, data_seed=7, non_blocking=False)
    assert (config.dispatch_batches, config.data_seed, config.non_blocking) == (True, 7, False)
    default = DataLoaderConfiguration()
    assert (default.dispatch_batches, default.data_seed, default.non_blocking) == (None, None, None)


@pytest.mark.parametrize("kwargs, error", [
    ({"data_seed": "7"}, ValueError), ({"data_seed": -1}, ValueError), ({"data_seed": True}, ValueError),
    ({"non_blocking": "yes"}, TypeError), ({"dispatch_batches": 1}, TypeError), ({"even_batches": None}, TypeError),
])
def test_configuration_rejects_bad_values_naming_the_field(kwargs: dict, error: type) -> None:
    name = next(iter(kwargs))
    with pytest.raises(error, match=f"DataLoaderConfiguration\\({name}="):
        DataLoaderConfiguration(**kwargs)


def test_dispatch_batches_true_gives_the_same_batches_as_false() -> None:
    torch.manual_seed(0)
    dispatched = _order(Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=True)))
    torch.manual_seed(0)
    assert dispatched == _order(Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=False)))


def test_data_seed_fixes_the_shuffle_whatever_the_global_rng() -> None:
    config = DataLoaderConfiguration(data_seed=1234)
    torch.manual_seed(0)
    first = _order(Accelerator(cpu=True, dataloader_config=config))
    torch.manual_seed(99)
    second = _order(Accelerator(cpu=True, dataloader_config=config))
    # (What iterating draws from the global RNG, as a plain loader does: tests/accelerator/test_data_global_rng.py.)
    assert first == second
    assert first != _order(Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(data_seed=1235)))
    loader = Accelerator(cpu=True, dataloader_config=config).prepare(DataLoader(TensorDataset(torch.arange(4))))
    assert loader.state_dict()["seed"] == 1234


@pytest.mark.parametrize("device, non_blocking, pin_memory, workers, expected", [
    (torch.device("cuda", 0), None, False, 2, (True, True)),   # CUDA: async copies from pinned memory by default
    (torch.device("cuda"), True, False, 2, (True, True)),
    # no workers: async copies, nothing pinned for you (a dataset of CUDA tensors cannot be pinned)
    (torch.device("cuda", 0), None, False, 0, (False, True)),
    (torch.device("cuda", 0), None, True, 0, (True, True)),    # the loader's own pin_memory is kept
    (torch.device("cuda", 0), False, False, 2, (False, False)),  # turned off: the loader's own pin_memory
    (torch.device("cuda", 0), False, True, 0, (True, False)),
    (torch.device("cpu"), None, False, 2, (False, False)),     # CPU: nothing changes
    (torch.device("cpu"), None, True, 0, (True, False)),
    (torch.device("cpu"), True, False, 0, (False, True)),      # asked for explicitly: honoured (a no-op on CPU)
    (torch.device("mps"), None, False, 2, (False, False)),     # other accelerators: off unless asked
    (None, None, False, 2, (False, False)),                    # device_placement=False: batches are not moved
])
def test_transfer_settings(device: torch.device | None, non_blocking: bool | None, pin_memory: bool, workers: int,
                           expected: tuple[bool, bool]) -> None:
    assert transfer_settings(device, non_blocking, pin_memory, workers) == expected


class _Stream(IterableDataset):
    def __iter__(self):  # noqa: ANN204
        return iter(range(4))


@pytest.mark.parametrize("dataset", [TensorDataset(torch.arange(4)), _Stream()])
def test_a_loader_prepared_for_cuda_pins_memory_and_copies_asynchronously(dataset: object) -> None:
    accelerator = Accelerator(cpu=True)
    prepared = prepare_data_loader(DataLoader(dataset, batch_size=2, num_workers=1), accelerator.loader_context,
                                   torch.device("cuda", 0))
    assert prepared.base_loader.pin_memory is True and prepared.non_blocking is True
    # Without workers: an asynchronous copy, but no pinning (found on a GPU: a TensorDataset of CUDA tensors made
    # every prepared loader raise "cannot pin 'torch.cuda.FloatTensor'" on its first batch)
    prepared = prepare_data_loader(DataLoader(dataset, batch_size=2), accelerator.loader_context, torch.device("cuda", 0))
    assert prepared.base_loader.pin_memory is False and prepared.non_blocking is True
    off = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(non_blocking=False))
    prepared = prepare_data_loader(DataLoader(dataset, batch_size=2, num_workers=1), off.loader_context, torch.device("cuda", 0))
    assert prepared.base_loader.pin_memory is False and prepared.non_blocking is False


def test_on_cpu_prepared_loaders_keep_their_settings_and_batches() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(4)), batch_size=2))
    assert loader.base_loader.pin_memory is False and loader.non_blocking is False
    assert [b[0].tolist() for b in loader] == [[0, 1], [2, 3]]
