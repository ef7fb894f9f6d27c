"""Loader positions that hold on any process count (``data/position.py``), in one process: each "process" of a run
is a loader prepared with that process index and count, and they are iterated in step as real processes are."""

from __future__ import annotations

import itertools
import json
import zlib
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from stoker import Accelerator, DataLoaderConfiguration
from stoker.accelerator import CheckpointError
from stoker.accelerator.checkpointing.atomic import MANIFEST_NAME
from stoker.accelerator.checkpointing.process_count import check_loader_states
from stoker.accelerator.checkpointing.state_file import STATE_NAME
from stoker.accelerator.checkpointing.tree import save_tree
from stoker.accelerator.data.loader import LoaderContext, PreparedDataLoader
from stoker.accelerator.data.position import ProcessCountError
from stoker.accelerator.data.prepare import prepare_data_loader
from stoker.accelerator.data.samplers import SeedableRandomSampler, ShardedBatchSampler


class Processes:
    """What a loader needs of a strategy: a process index and count (the seed is fixed, nothing is broadcast)."""

    def __init__(self, num_processes: int, process_index: int) -> None:
        self.num_processes, self.process_index = num_processes, process_index

    def broadcast_object(self, obj):
        return obj


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def run_of(n: int, make: callable, split: bool = False) -> list[PreparedDataLoader]:
    """One prepared loader per process of an ``n``-process run (``make()`` builds the user's loader)."""
    config = DataLoaderConfiguration(data_seed=11, split_batches=split, use_stateful_dataloader=True)
    return [prepare_data_loader(make(), LoaderContext(Processes(n, p), config), None) for p in range(n)]


def take(run: list[PreparedDataLoader], batches: int) -> tuple[list[int], list]:
    """``batches`` batches of every process, in step; returns their samples and the open iterators."""
    iterators = [iter(loader) for loader in run]
    seen = [int(i) for _ in range(batches) for it in iterators for i in next(it)]
    return seen, iterators


def rest(run: list[PreparedDataLoader]) -> list[int]:
    return [int(i) for loader in run for batch in loader for i in batch]


def shuffled(size: int = 8, n: int = 40, drop_last: bool = False):
    return lambda: DataLoader(list(range(n)), batch_size=size, shuffle=True, drop_last=drop_last)


# -- the sampler ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,split,even,total", [(1, False, True, 40), (2, False, True, 40), (3, False, True, 40),
                                                (3, False, True, 37), (2, True, True, 37), (3, False, False, 37)])
def test_a_skip_of_the_batches_every_process_took_gives_what_a_local_skip_gave(n, split, even, total) -> None:
    """The sampler's skip counts inner batches of all processes; on the same process count it continues exactly
    where the same process's own batches left off (what resumes gave before)."""
    for p in range(n):
        inner = BatchSampler(SeedableRandomSampler(total, seed=3), 4 if not split else 6, False)
        sampler = ShardedBatchSampler(inner, n, p, even_batches=even, split_batches=split)
        full = list(sampler)
        for k in range(len(full) + 1):
            sampler.skip = sampler.inner_batches_before(k)
            assert list(sampler) == full[k:]
            assert sampler.local_batches_before(sampler.inner_batches_before(k)) == k


def test_after_any_global_position_the_processes_share_the_rest_of_the_epoch() -> None:
    inner = BatchSampler(SeedableRandomSampler(36, seed=3), 4, False)  # 9 inner batches
    order = [i for b in inner for i in b]
    for done in range(10):
        shards = [ShardedBatchSampler(inner, 2, p) for p in range(2)]
        for s in shards:
            s.skip = done
        got = [list(s) for s in shards]
        assert len(got[0]) == len(got[1]) == shards[0].__len__() - shards[0].local_batches_before(done)
        taken = Counter(i for batches in got for b in batches for i in b)
        padding = sum(s.padding for s in shards) // 2  # each process counts the padding of the whole epoch
        assert set(order[done * 4:]) <= set(taken)  # every remaining sample, once, plus the padding to even batches
        assert sum(taken.values()) == len(order[done * 4:]) + padding


def test_drop_last_drops_a_short_last_round_instead_of_padding_it() -> None:
    """22 samples in batches of 4 with drop_last: 5 full batches, which 2 processes share as 2 each (the fifth
    is dropped, as Accelerate and Lightning's per-process loaders do); no sample is repeated to pad a round."""
    for split in (False, True):
        run = run_of(2, lambda: DataLoader(list(range(22)), batch_size=4, drop_last=True), split)
        got = [[b.tolist() for b in loader] for loader in run]
        assert [len(batches) for batches in got] == [len(loader) for loader in run] == ([2, 2] if not split else [5, 5])
        samples = [i for batches in got for b in batches for i in b]
        assert all(len(b) == (4 if not split else 2) for batches in got for b in batches)
        assert len(samples) == len(set(samples)) == (16 if not split else 20)
        assert sum(loader.padding_samples for loader in run) == 0
    inner = BatchSampler(SeedableRandomSampler(22, seed=3), 4, True)  # a resume's skip counts the same rounds
    for p in range(2):
        sampler = ShardedBatchSampler(inner, 2, p)
        full = list(sampler)
        for k in range(len(full) + 1):
            sampler.skip = sampler.inner_batches_before(k)
            assert list(sampler) == full[k:] and sampler.local_batches_before(sampler.inner_batches_before(k)) == k


# -- prepared loaders carried over to another process count ---------------------------------------------------------
@pytest.mark.parametrize("before,after,sizes,split", [
    (2, 1, (8, 8), True), (1, 2, (8, 8), True), (2, 1, (4, 8), False), (1, 2, (8, 4), False),
    (2, 1, (4, 4), False), (1, 2, (4, 4), False), (2, 3, (4, 4), False), (3, 2, (2, 3), False),
])
def test_a_shuffled_epoch_continues_on_another_process_count_with_each_sample_once(before, after, sizes, split):
    first = run_of(before, shuffled(sizes[0], n=48), split)
    seen, _ = take(first, 2)
    assert seen  # an epoch interrupted after 2 batches of every process
    state = first[0].checkpoint_state_dict()
    second = run_of(after, shuffled(sizes[1], n=48), split)
    for loader in second:
        loader.load_state_dict(state)
    remaining = rest(second)
    padding = sum(loader.padding_samples for loader in second) // after  # even batches: repeated, then dropped
    assert sorted(set(seen + remaining)) == list(range(48))  # every sample, once (plus the padding)
    assert len(seen) + len(remaining) == 48 + padding
    assert padding == (0 if (before, after) != (2, 3) else 4)
    for loader in second:  # the epoch ended where it should: the next one starts from its first batch
        assert (loader.epoch, loader.batches_yielded) == (1, 0)


def test_the_position_counts_this_processs_batches_as_len_minus_what_remains() -> None:
    first = run_of(1, shuffled(4, n=40))  # 10 inner batches
    take(first, 3)
    second = run_of(2, shuffled(4, n=40))
    for loader in second:
        loader.load_state_dict(first[0].checkpoint_state_dict())
        assert loader.rebased
        assert (len(loader), loader.batches_yielded) == (5, 5 - 4)  # 7 inner batches left: 4 each (padded)
    iterators = [iter(loader) for loader in second]
    next(iterators[0])
    assert second[0].remaining_batches == 4 and not second[0].end_of_dataloader


def test_the_same_process_count_keeps_the_saved_position_and_state_dict_its_keys() -> None:
    first = run_of(2, shuffled(4, n=40))
    take(first, 2)
    assert set(first[1].state_dict()) == {"epoch", "batches_yielded", "seed"}
    state = first[1].checkpoint_state_dict()
    assert state["position"] == {"num_processes": 2, "finished": False, "rebased": False, "inner_batches": 4,
                                 "samples": 16}
    again = run_of(2, shuffled(4, n=40))
    again[1].load_state_dict(state)
    assert again[1].batches_yielded == 2 and not again[1].rebased


def test_a_stream_continues_on_another_process_count() -> None:
    for before, after, sizes in ((2, 1, (4, 8)), (1, 2, (8, 4)), (1, 2, (4, 4)), (2, 3, (2, 4))):
        first = run_of(before, lambda b=sizes[0]: DataLoader(Stream(48), batch_size=b))
        seen, _ = take(first, 2)
        second = run_of(after, lambda b=sizes[1]: DataLoader(Stream(48), batch_size=b))
        for loader in second:
            loader.load_state_dict(first[0].checkpoint_state_dict())
        remaining = rest(second)
        padding = second[0].padding_samples  # even batches: the stream's first items complete the last group
        assert sorted(set(seen + remaining)) == list(range(48)), (before, after, sizes)
        assert len(seen) + len(remaining) == 48 + padding and padding == (8 if after == 3 else 0)


def test_a_stream_resumed_again_after_a_conversion_keeps_its_item_count() -> None:
    first = run_of(1, lambda: DataLoader(Stream(48), batch_size=4))
    seen, _ = take(first, 3)  # 12 items: one and a half groups of the next run (2 processes x 4)
    second = run_of(2, lambda: DataLoader(Stream(48), batch_size=4))
    for loader in second:
        loader.load_state_dict(first[0].checkpoint_state_dict())
    more, _ = take(second, 1)
    third = run_of(2, lambda: DataLoader(Stream(48), batch_size=4))
    for p, loader in enumerate(third):
        loader.load_state_dict(second[p].checkpoint_state_dict())
    last = rest(third)
    assert sorted(set(seen + more + last)) == list(range(48))
    assert len(seen + more + last) == 48 + third[0].padding_samples and third[0].padding_samples == 4


def test_a_stream_resumed_on_the_same_count_through_torchdata_keeps_counting_items() -> None:
    """torchdata restores a same-count position itself; the item count the next checkpoint records still includes
    what came before."""
    first = run_of(1, lambda: DataLoader(Stream(48), batch_size=4))
    seen, _ = take(first, 2)
    second = run_of(1, lambda: DataLoader(Stream(48), batch_size=4))
    second[0].load_state_dict(first[0].checkpoint_state_dict())
    assert "loader" in first[0].state_dict() and not second[0].rebased
    more, _ = take(second, 2)
    assert second[0].checkpoint_state_dict()["position"]["items"] == 16
    third = run_of(2, lambda: DataLoader(Stream(48), batch_size=4))
    for loader in third:
        loader.load_state_dict(second[0].checkpoint_state_dict())
    assert sorted(seen + more + rest(third)) == list(range(48))


@pytest.mark.parametrize("after", [2, 1])
def test_an_epoch_continued_from_a_global_count_is_saved_and_continued_again_by_it(after) -> None:
    """3 inner batches done, continued on 2 processes (each counts 1 batch done): saving again, before or after
    more batches, and resuming (on 2 or 1) still gives every sample once."""
    first = run_of(1, shuffled(4, n=40))
    seen, _ = take(first, 3)
    for more in (0, 1):
        second = run_of(2, shuffled(4, n=40))
        for loader in second:
            loader.load_state_dict(first[0].checkpoint_state_dict())
        taken, _ = take(second, more)
        state = second[0].checkpoint_state_dict()
        assert state["position"]["inner_batches"] == 3 + 2 * more and state["position"]["rebased"]
        third = run_of(after, shuffled(4, n=40))
        for loader in third:
            loader.load_state_dict(state)
        last = rest(third)
        padding = sum(loader.padding_samples for loader in third) // after
        assert sorted(set(seen + taken + last)) == list(range(40))
        assert len(seen + taken + last) == 40 + padding


def test_a_loop_left_early_in_a_continued_epoch_goes_on_from_where_it_left() -> None:
    first = run_of(1, shuffled(4, n=40))
    seen, _ = take(first, 3)
    [one] = run_of(1, shuffled(4, n=40))
    one.load_state_dict(first[0].checkpoint_state_dict())
    second = run_of(2, shuffled(4, n=40))
    for loader in second:
        loader.load_state_dict(first[0].checkpoint_state_dict())
    taken, iterators = take(second, 1)
    for it in iterators:
        it.close()  # a `break`: the next iteration continues the epoch
    assert sorted(set(seen + taken + rest(second))) == list(range(40))


# -- refusals -------------------------------------------------------------------------------------------------------
def test_a_batch_size_that_does_not_divide_the_samples_done_is_refused_naming_both_counts() -> None:
    first = run_of(2, shuffled(4, n=48))
    take(first, 1)  # 8 samples
    second = run_of(1, shuffled(16, n=48))
    before = (second[0].epoch, second[0].batches_yielded, second[0].seed)
    with pytest.raises(ProcessCountError, match=r"saved by 2 process\(es\) and this run has 1: 8 samples of epoch 0 "
                                                r"were consumed, which is not a whole number of batches of the inner "
                                                r"batch size 16 used now\. Resume with 2 processes"):
        second[0].load_state_dict(first[0].checkpoint_state_dict())
    assert (second[0].epoch, second[0].batches_yielded, second[0].seed) == before


def test_a_stream_read_by_worker_processes_is_refused_on_another_count() -> None:
    first = run_of(1, lambda: DataLoader(Stream(48), batch_size=4, num_workers=1))
    take(first, 1)
    state = first[0].checkpoint_state_dict()
    assert "items" not in state["position"]
    second = run_of(2, lambda: DataLoader(Stream(48), batch_size=4))
    with pytest.raises(ProcessCountError, match=r"loader worker processes .*Resume with 1 processes, or use "
                                                r"num_workers=0 in both runs"):
        second[0].load_state_dict(state)


def test_a_position_saved_before_positions_were_portable_is_refused_on_another_count(tmp_path) -> None:
    [loader] = run_of(1, shuffled(4, n=40))
    parts = [("dataloader.safetensors", loader, "dataloader #0")]
    old = {"epoch": 0, "batches_yielded": 3, "seed": 11}
    with pytest.raises(ProcessCountError, match="saved by 2 process\\(es\\) before stoker recorded positions"):
        check_loader_states(str(tmp_path), parts, {"dataloader.safetensors": old},
                            {"num_processes": 2, "counters": {"step": 3}}, 1)
    check_loader_states(str(tmp_path), parts, {"dataloader.safetensors": old},
                        {"num_processes": 1, "counters": {"step": 3}}, 1)  # the same count: as before


# -- through save_state / load_state --------------------------------------------------------------------------------
def _saved(tmp_path: Path, gas: int = 1, steps: int = 2) -> tuple[Accelerator, nn.Module, Path]:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=gas,
                      dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model, loader = acc.prepare(nn.Linear(2, 1), DataLoader(torch.randn(16, 2), batch_size=4))
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    for x in itertools.islice(loader, steps):
        with acc.accumulate(model):
            acc.backward(model(x).sum())
            opt.step()
            opt.zero_grad()
    return acc, model, Path(acc.save_state(str(tmp_path / "ckpt")))


def _rewrite(folder: Path, name: str, data: bytes) -> None:
    """Replaces a file of a checkpoint and records it in the manifest, as a careful tamperer would."""
    (folder / name).write_bytes(data)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["files"][name] = {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.mark.parametrize("change,problem", [
    (lambda s: s.pop("epoch"), r"key 'epoch' is missing, expected an integer >= 0"),
    (lambda s: s.update(epocj=s.pop("epoch")), r"key 'epoch' is missing"),
    (lambda s: s.update(batches_yielded="2"), r"key 'batches_yielded' is '2', expected an integer >= 0"),
    (lambda s: s["position"].update(num_processes=0), r"key 'position.num_processes' is 0, expected an integer >= 1"),
])
def test_a_tampered_loader_state_names_the_file_and_the_key_and_changes_nothing(tmp_path, change, problem) -> None:
    acc, model, ckpt = _saved(tmp_path)
    from stoker.accelerator import load_tree

    state = load_tree(str(ckpt / "dataloader.safetensors"))
    change(state)
    save_tree(str(tmp_path / "forged"), state)
    _rewrite(ckpt, "dataloader.safetensors", (tmp_path / "forged").read_bytes())
    weights = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    with pytest.raises(CheckpointError, match=r"dataloader\.safetensors: the dataloader #0 position is malformed: "
                                              + problem):
        acc.load_state(str(ckpt))
    assert torch.equal(model.weight, weights + 1.0)  # nothing was loaded
    assert acc.step == 2


def test_an_open_accumulation_window_saved_by_another_process_count_is_refused(tmp_path) -> None:
    acc, _, ckpt = _saved(tmp_path, gas=2, steps=3)  # 1 optimizer step and one micro-step of the next window
    state = json.loads((ckpt / STATE_NAME).read_text())
    assert state["counters"]["micro_step"] == 1
    state["num_processes"] = 2  # as if saved by two processes
    _rewrite(ckpt, STATE_NAME, json.dumps(state).encode())
    with pytest.raises(ProcessCountError, match=r"saved by 2 in the middle of a gradient accumulation window "
                                                r"\(micro_step 1\).*Resume with 2 processes"):
        acc.load_state(str(ckpt))
