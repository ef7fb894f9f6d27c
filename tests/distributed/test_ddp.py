"""DDP across two real processes (gloo on 127.0.0.1): parity with one process, gradient sync around accumulation
boundaries, sharded loaders, and the collectives' semantics.

One launch runs every check (``tests/helpers/dist_ddp_worker.py``); the tests below read what each rank saw.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.dist_spawn import read_results, run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    run_workers("dist_ddp_worker.py", [out], nprocs=2, timeout=150)
    return read_results(out)


def test_launch_uses_ddp_with_two_processes(ranks: list[dict]) -> None:
    assert [r["num_processes"] for r in ranks] == [2, 2]
    assert [r["distributed_type"] for r in ranks] == ["MULTI_CPU", "MULTI_CPU"]
    assert [r["wrapped_type"] for r in ranks] == ["DistributedDataParallel"] * 2
    assert all(r["unwrap_is_user_model"] for r in ranks)


def test_two_processes_batch_b_equal_one_process_batch_2b(ranks: list[dict]) -> None:
    # fp32, accumulation 2, shuffled: only the order of the float additions differs (DDP averages two means).
    for r in ranks:
        assert r["parity_max_diff"] < 1e-6
        assert r["ddp_step"] == 4
        assert r["weights_agree"] == 0.0


def test_gradients_differ_on_non_sync_micro_steps_and_agree_after_sync(ranks: list[dict]) -> None:
    for r in ranks:
        assert [s["sync"] for s in r["sync_steps"]] == [False, True, False, True]
        assert [s["ranks_differ"] for s in r["sync_steps"]] == [True, False, True, False]
        assert r["no_sync_differs"]


@pytest.mark.parametrize("mode", ["round_robin", "split"])
def test_gather_for_metrics_returns_exactly_the_dataset(ranks: list[dict], mode: str) -> None:
    # 13 samples, batch 4, two processes: even_batches repeats samples, gather_for_metrics drops them again.
    for r in ranks:
        assert r[f"metrics_{mode}"] == list(range(13))
        assert r[f"metrics_{mode}_objects"] == list(range(13))
        assert r[f"metrics_{mode}_labels_ok"]
    assert ranks[0][f"metrics_{mode}_len"] == ranks[1][f"metrics_{mode}_len"] == {"round_robin": 2, "split": 4}[mode]


def test_gather_reduce_pad(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["gather"] == [1.0, 10.0, 2.0, 20.0]
        assert r["gather_scalar"] == [0, 1]
        assert r["gather_uneven"] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
        assert r["gather_nested"] == [0, 1]
        assert r["reduce_sum"] == [3.0, 30.0]
        assert r["reduce_mean"] == [1.5, 15.0]
        assert r["any_process"] == [True, False]
    assert [r["reduce_none"] for r in ranks] == [[1.0, 10.0], [2.0, 20.0]]
    assert [r["pad"] for r in ranks] == [[0, 1, -1], [0, 1, 2]]
    assert [r["pad_first"] for r in ranks] == [[-1, 0, 1], [0, 1, 2]]


def test_split_between_processes_and_main_process_first(ranks: list[dict]) -> None:
    assert [r["split"] for r in ranks] == [[0, 1, 2], [3, 4]]
    assert [r["split_padded"] for r in ranks] == [[0, 1, 2], [3, 4, 4]]
    assert [r["split_dict"] for r in ranks] == [[[0, 1], ["w", "x"]], [[2, 3], ["y", "z"]]]
    assert all(r["main_first_saw_marker"] for r in ranks)


def test_shuffle_is_identical_on_all_ranks_and_shards_are_disjoint(ranks: list[dict]) -> None:
    # The ranks seeded their global RNGs differently before prepare().
    first, second = ranks[0]["shuffle_epochs"]
    assert sorted(first) == sorted(second) == list(range(16))
    assert first != second  # a new order each epoch
    assert first != list(range(16))
    assert ranks[0]["shuffle_epochs"] == ranks[1]["shuffle_epochs"]


def test_a_loader_in_sequential_order_prepared_first_leaves_the_shuffle_as_on_one_process(ranks: list[dict]) -> None:
    # The same global RNG before prepare(): the shuffled loader's order is the one a single process gets.
    from torch.utils.data import DataLoader, TensorDataset

    from stoker import Accelerator

    torch.manual_seed(7)
    _, shuffled = Accelerator(cpu=True).prepare(DataLoader(TensorDataset(torch.arange(16)), batch_size=2),
                                                DataLoader(TensorDataset(torch.arange(16)), batch_size=2, shuffle=True))
    one_process = [v for b in shuffled for v in b[0].tolist()]
    assert ranks[0]["shuffle_after_sequential"] == ranks[1]["shuffle_after_sequential"] == one_process


def test_scheduler_steps_num_processes_times_unless_split_batches(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["scheduler_last_epoch_split_False"] == 6
        assert r["scheduler_last_epoch_split_True"] == 3


def test_save_model_main_process_writes_and_group_teardown(ranks: list[dict]) -> None:
    assert ranks[0]["export_files"] == ["model.safetensors"]
    for r in ranks:
        assert r["group_kept_by_other"]
        assert r["group_destroyed_by_creator"]


def test_save_state_mid_window_resumes_exactly_with_per_process_state(ranks: list[dict]) -> None:
    # Shuffled loader, dropout, accumulation 2, saved after micro-step 5 (inside a window where each process's
    # gradients are still its own): resuming gives bit-identical weights.
    files = ranks[0]["ckpt_files"]
    for name in ("random_states_0", "random_states_1", "dataloader", "dataloader_process1", "gradients",
                 "gradients_process1"):
        assert f"{name}.safetensors" in files
    for r in ranks:
        assert r["resume_equal"], r["resume_max_diff"]
        assert r["resume_step"] == 6


def test_fp16_summed_losses_over_ragged_ranks_give_the_exact_per_item_mean(ranks: list[dict]) -> None:
    # The fp16 window divides summed losses by one power of two agreed by all ranks, then corrects it exactly.
    for r in ranks:
        assert r["summed_fp16"] == r["summed_fp32"]
        torch.testing.assert_close(torch.tensor(r["summed_fp32"]), torch.tensor(r["summed_reference"]))


@pytest.mark.parametrize("split,expected", [
    (False, [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 0, 1, 2]]),  # whole batches of each group of 8
    (True, [[0, 1, 4, 5, 8, 9, 12, 0], [2, 3, 6, 7, 10, 11, 1, 2]]),  # half of every batch of 4
])
def test_iterable_dataset_is_sharded_and_gather_for_metrics_drops_the_padding(ranks: list[dict], split: bool,
                                                                              expected: list) -> None:
    # A stream of 13 items without a length, batch 4: each process keeps its share of every global batch; the
    # short last group is completed with the stream's first items, so both processes get as many batches.
    assert [r[f"iterable_split_{split}_mine"] for r in ranks] == expected
    for r in ranks:
        assert r[f"iterable_split_{split}_gathered"] == list(range(13))
