"""Prepared data loaders on one process: batch placement at any nesting, same batches as the original, lengths."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Accelerator, send_to_device
from tests.helpers.models import make_loader, make_regression_data

Pair = namedtuple("Pair", ["inputs", "mask"])


@dataclasses.dataclass
class Batch:
    tokens: torch.Tensor
    extras: dict
    name: str = "batch"


def _nested(offset: int = 0) -> dict:
    t = torch.arange(4.0) + offset
    return {
        "x": t,
        "pair": Pair(t + 1, torch.ones(4, dtype=torch.bool)),
        "list": [t + 2, (t + 3, "label"), {"deep": [t + 4]}],
        "dc": Batch(t + 5, {"ids": torch.arange(3)}),
        "count": 7,
    }


def _leaves(obj: object) -> list[object]:
    """Every leaf in a fixed order, with the container types along the way (to compare two nestings)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj):
        return [type(obj)] + [x for f in dataclasses.fields(obj) for x in _leaves(getattr(obj, f.name))]
    if isinstance(obj, dict):
        return [type(obj)] + [x for k in sorted(obj) for x in [k, *_leaves(obj[k])]]
    if isinstance(obj, (list, tuple)):
        return [type(obj)] + [x for o in obj for x in _leaves(o)]
    return [obj]


def test_send_to_device_moves_every_tensor_and_keeps_every_container_type() -> None:
    batch = _nested()
    # The meta device exists on every machine: a tensor left behind would still report "cpu".
    moved = send_to_device(batch, torch.device("meta"))
    before, after = _leaves(batch), _leaves(moved)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        if isinstance(a, torch.Tensor):
            assert b.device.type == "meta" and b.shape == a.shape and b.dtype == a.dtype
        else:
            assert a == b  # container types (namedtuple, dataclass, dict, list, tuple) and plain values
    assert isinstance(moved["pair"], Pair) and isinstance(moved["dc"], Batch) and moved["dc"].name == "batch"


class Graph:
    """A batch class of its own with a ``to`` (as a graph library's data object has): moved whole, as Accelerate and
    Lightning move it."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def to(self, device: torch.device) -> Graph:  # takes no non_blocking
        return Graph(self.x.to(device))


@dataclasses.dataclass
class InPlace:
    x: torch.Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> None:  # moves itself, returns nothing
        self.x = self.x.to(device, non_blocking=non_blocking)


def test_send_to_device_moves_objects_that_have_their_own_to() -> None:
    moved = send_to_device({"g": Graph(torch.ones(2)), "rest": [InPlace(torch.ones(1)), "label"]},
                           torch.device("meta"))
    assert isinstance(moved["g"], Graph) and moved["g"].x.device.type == "meta"
    assert isinstance(moved["rest"][0], InPlace) and moved["rest"][0].x.device.type == "meta"
    assert moved["rest"][1] == "label"
    assert send_to_device(Graph(torch.ones(1)), torch.device("meta")).x.device.type == "meta"
    # A PackedSequence (a namedtuple) moves by its own to(), which keeps its batch sizes on the CPU as torch needs.
    packed = torch.nn.utils.rnn.pack_sequence([torch.ones(3, 2), torch.ones(2, 2)])
    moved = send_to_device({"seq": packed}, torch.device("meta"))["seq"]
    assert moved.data.device.type == "meta" and moved.batch_sizes.device.type == "cpu"


def test_send_to_device_fast_paths_for_a_tensor_and_a_pair() -> None:
    x, y = torch.ones(2), torch.zeros(2)
    assert send_to_device(x, torch.device("meta")).device.type == "meta"
    moved = send_to_device((x, y), torch.device("meta"))
    assert type(moved) is tuple and all(t.device.type == "meta" for t in moved)
    moved = send_to_device([x, y], torch.device("meta"))
    assert type(moved) is list and all(t.device.type == "meta" for t in moved)
    moved = send_to_device({"input_ids": x, "labels": y}, torch.device("meta"))
    assert list(moved) == ["input_ids", "labels"] and all(t.device.type == "meta" for t in moved.values())
    # A non-tensor after a tensor leaves the fast path half-way: the result must still be complete.
    moved = send_to_device((x, "label", y), torch.device("meta"))
    assert moved[0].device.type == "meta" and moved[1] == "label" and moved[2].device.type == "meta"
    moved = send_to_device({"x": x, "n": 3, "y": [y]}, torch.device("meta"))
    assert moved["x"].device.type == "meta" and moved["n"] == 3 and moved["y"][0].device.type == "meta"


class _NestedDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> dict:
        return _nested(i)


def test_prepared_loader_places_nested_batches_on_the_device() -> None:
    accelerator = Accelerator(cpu=True)
    # batch_size=None: each sample is a batch, structure kept (default_collate cannot rebuild dataclasses).
    loader = accelerator.prepare(DataLoader(_NestedDataset(), batch_size=None))
    seen = list(loader)
    # Compared with the original loader's batches (its default_convert already turns plain tuples into lists).
    original = list(DataLoader(_NestedDataset(), batch_size=None))
    assert len(seen) == len(original) == 6
    assert isinstance(seen[0]["pair"], Pair) and isinstance(seen[0]["dc"], Batch)
    for batch, reference in zip(seen, original):
        got, expected = _leaves(batch), _leaves(reference)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            if isinstance(b, torch.Tensor):
                assert torch.equal(a, b) and a.device == accelerator.device
            else:
                assert a == b


def test_prepared_loader_yields_the_original_batches_and_length() -> None:
    dataset = make_regression_data(n=30)
    raw = make_loader(dataset, batch_size=8)
    prepared = Accelerator(cpu=True).prepare(make_loader(dataset, batch_size=8))
    assert len(prepared) == len(raw) == 4
    assert prepared.batch_size == 8 and prepared.total_batch_size == 8
    for (x, y), (rx, ry) in zip(prepared, raw, strict=True):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_prepared_loader_keeps_drop_last_and_a_user_batch_sampler() -> None:
    dataset = make_regression_data(n=10)
    accelerator = Accelerator(cpu=True)
    dropped = accelerator.prepare(DataLoader(dataset, batch_size=4, drop_last=True))
    assert [len(x) for x, _ in dropped] == [4, 4]
    custom = accelerator.prepare(DataLoader(dataset, batch_sampler=[[9, 0], [1, 2, 3], [4]]))
    got = [x for x, _ in custom]
    assert [len(x) for x in got] == [2, 3, 1]
    assert torch.equal(got[0], dataset.tensors[0][[9, 0]])


def test_end_of_dataloader_is_true_only_on_the_last_batch() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(make_loader(make_regression_data(n=12), batch_size=4))
    flags = [loader.end_of_dataloader for _ in loader]
    assert flags == [False, False, True]
    assert loader.end_of_dataloader is False  # reset once the loop is over


class _Numbers(IterableDataset):
    def __iter__(self) -> Iterator[torch.Tensor]:
        yield from (torch.tensor([float(i)]) for i in range(5))


def test_iterable_dataset_of_unknown_length_still_flags_its_last_batch() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(_Numbers(), batch_size=2))
    flags, values = [], []
    for batch in loader:
        flags.append(loader.end_of_dataloader)
        values.append(batch.flatten().tolist())
    assert values == [[0.0, 1.0], [2.0, 3.0], [4.0]]
    assert flags == [False, False, True]


def test_skip_first_batches_starts_later_without_loading_the_skipped_samples() -> None:
    loaded = []

    class Recording(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> int:
            loaded.append(i)
            return i

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(Recording(), batch_size=3))
    skipped = accelerator.skip_first_batches(loader, 2)
    assert len(skipped) == 2
    assert [b.tolist() for b in skipped] == [[6, 7, 8], [9]]
    assert loaded == [6, 7, 8, 9]


def test_skip_first_batches_with_worker_processes() -> None:
    # torch's multi-process loader calls iter(batch_sampler) twice; the skip must survive the first call.
    dataset = torch.utils.data.TensorDataset(torch.arange(10))
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=3, num_workers=1))
    assert [b[0].tolist() for b in accelerator.skip_first_batches(loader, 2)] == [[6, 7, 8], [9]]
    assert [b[0].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # the next epoch is whole


def test_leaving_a_loop_early_keeps_the_position_for_save_state_and_the_next_loop() -> None:
    # Accelerate keeps a loader's position when the loop is left with `break`; so do we, and the next loop
    # continues the same epoch instead of replaying its start.
    torch.manual_seed(0)
    data = torch.arange(20.0).unsqueeze(1)
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(torch.utils.data.TensorDataset(data), batch_size=4, shuffle=True))
    full_epoch = [b[0].flatten().tolist() for b in loader]
    second_epoch = [b[0].flatten().tolist() for b in loader]
    assert full_epoch != second_epoch  # a new shuffle each epoch

    loader.set_epoch(0)
    seen = []
    for (x,) in loader:
        seen.append(x.flatten().tolist())
        if len(seen) == 2:
            break
    assert loader.state_dict()["batches_yielded"] == 2 and loader.state_dict()["epoch"] == 0
    rest = [b[0].flatten().tolist() for b in loader]
    assert seen + rest == full_epoch
    assert [b[0].flatten().tolist() for b in loader] == second_epoch
