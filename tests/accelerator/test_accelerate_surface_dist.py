"""Accelerate's wider surface in two real processes (gloo on 127.0.0.1): process control, triggers, ``save``,
profiling, ``trigger_sync_in_backward``, ``join_uneven_inputs``, kwargs handlers and plugins, ``stoker.utils``.

One launch runs every check (``tests/compat/surface_worker.py``); the tests below read what each rank saw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist_spawn import read_results, run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]
WORKER = Path(__file__).resolve().parents[1] / "compat" / "surface_worker.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("surface")
    run_workers(WORKER, [out], nprocs=2, timeout=200)
    return read_results(out)


def test_state_describes_a_two_process_ddp_run(ranks: list[dict]) -> None:
    for rank, r in enumerate(ranks):
        assert r["state"] == {"distributed_type": "MULTI_CPU", "old_name": True, "use_distributed": True,
                              "is_last": rank == 1, "backend": "gloo", "num_processes": 2}
        assert r["timeout_s"] == 77  # InitProcessGroupKwargs reached init_process_group
        assert r["copy_state_equal"]


def test_decorators_run_where_they_say(ranks: list[dict]) -> None:
    assert ranks[0]["printed"] == ["main", "local"]
    assert ranks[1]["printed"] == ["last", "one"]


def test_a_trigger_set_on_one_process_is_seen_by_all_once(ranks: list[dict]) -> None:
    # The second Accelerator of the process has its own (unset) flag; rank 1's flag is seen everywhere, then reset.
    assert [r["triggers"] for r in ranks] == [[False, True, False]] * 2


def test_save_writes_from_the_main_process_and_profile_traces_every_process(ranks: list[dict]) -> None:
    assert ranks[0]["saved_rank"] == [0, 0]
    assert ranks[0]["traces"] == ["profile_0.json", "profile_1.json"]


def test_trigger_sync_in_backward_syncs_a_backward_whose_forward_ran_in_no_sync(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["before_trigger_in_sync"] is False and r["after_trigger_in_sync"] is True


def test_join_uneven_inputs_lets_processes_run_out_of_batches_at_different_times(ranks: list[dict]) -> None:
    assert [r["join_steps"] for r in ranks] == [2, 1]
    assert [r["join_override"] for r in ranks] == [[False, 2], [False, 1]]
    assert all(r["join_restored"] is True for r in ranks)


def test_ddp_kwargs_reach_distributed_data_parallel(ranks: list[dict]) -> None:
    for r in ranks:
        hooked, plain = r["ddp_fp16_hook"], r["ddp_no_hook"]
        assert hooked["find_unused"] and hooked["bucket_bytes"] == 1024 * 1024 and hooked["in_sync"]
        assert plain["bucket_bytes"] == 25 * 1024 * 1024 and plain["in_sync"]
        # The fp16 compression hook all-reduces half-precision gradients: every value is an fp16 value.
        assert hooked["fp16_values"] is True and plain["fp16_values"] is False


def test_sync_each_batch_syncs_gradients_on_every_micro_step(ranks: list[dict]) -> None:
    for r in ranks:  # [sync_gradients, gradients equal on both processes] per micro-step
        assert r["sync_each_batch"] == [[False, True], [True, True]]
        assert r["sync_on_window_end"] == [[False, False], [True, True]]


def test_fsdp_plugin_shards_the_named_classes(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["fsdp"] == {"type": "FSDP", "sharded": [True, False, True], "weights_same": True, "is_fsdp2": True,
                             "pickled": True}


def test_stoker_utils_collectives(ranks: list[dict]) -> None:
    for rank, r in enumerate(ranks):
        u = r["utils"]
        assert u["gather"] == [1.0, 3.0, 2.0, 4.0] and u["gather_object"] == [0, 1]
        assert u["broadcast"] == [2.0, 4.0] and u["broadcast_object_list"] == [1, "x"]
        assert u["reduce_mean"] == [1.5, 3.5] and u["reduce_sum"] == [3.0, 7.0] and u["reduce_max"] == [2.0, 4.0]
        assert u["pad"] == [1.0, 0.0] if rank == 0 else u["pad"] == [1.0, 1.0]
        assert u["seed_differs"] and u["rng_synced"]
        assert u["tqdm_disabled"] is (rank == 1)


def test_rng_types_torch_syncs_the_global_rng_when_a_loader_starts(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["rng_types_synced"] == {"generator": False, "torch": True}


def test_local_sgd_averages_the_processes_parameters_every_k_steps(ranks: list[dict]) -> None:
    for r in ranks:  # 3 steps with local_sgd_steps=2, then the end of the block
        assert r["local_sgd_same"] == [False, True, False, True]


def test_get_logger_logs_on_the_main_process_unless_asked(ranks: list[dict]) -> None:
    assert ranks[0]["logged"] == ["main only", "all 0", "ordered 0"]
    assert ranks[1]["logged"] == ["all 1", "ordered 1"]
