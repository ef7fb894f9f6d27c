"""FSDP2 (``strategy="fsdp"``) across two real processes: parity with DDP, sharding policy, optimizer remapping,
clipping across shards, mixed precision through FSDP's policy, full-state export and sharded checkpoints."""

from __future__ import annotations

import pytest

from tests.helpers.dist_spawn import read_results, run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp")
    run_workers("dist_fsdp_worker.py", [out], nprocs=2, timeout=150)
    return read_results(out)


def test_fully_shard_per_layer_with_the_default_policy(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["fsdp_type"] == "FSDP"
        assert r["sharded_modules"] == ["<root>", "blocks.0", "blocks.1"]  # the ModuleList's blocks, then the root
        assert r["param_types"] == ["DTensor"]
        assert r["local_shard_rows"] == 8  # stem.weight is 16 x 8: half the rows on each process
        assert r["unwrap_is_model"]


def test_a_user_policy_chooses_the_sharded_modules(ranks: list[dict]) -> None:
    assert ranks[0]["policy_classes"] == ["<root>", "blocks.0.0", "blocks.1.0", "head", "stem"]


def test_fsdp_matches_ddp_within_float_tolerance(ranks: list[dict]) -> None:
    # AdamW, accumulation 2, clip_grad_norm_ 0.5 on every step, shuffled data, two epochs.
    for r in ranks:
        assert r["num_norms"] == 4
        assert r["norm_diff"] < 1e-5  # the total norm is computed over all shards
        assert r["parity_opt_first"] < 1e-5  # optimizer built before prepare: remapped to the sharded parameters
        assert r["parity_opt_after"] < 1e-5


def test_save_model_gathers_a_full_state_dict_on_the_main_process(ranks: list[dict]) -> None:
    assert ranks[0]["export_files"] == ["model.safetensors"]
    assert ranks[0]["export_matches"] == 0.0
    assert [r["state_dict_keys_main"] for r in ranks] == [8, 0]


@pytest.mark.parametrize("precision,dtype,scaler", [("bf16", "torch.bfloat16", "NoneType"),
                                                    ("fp16", "torch.float16", "QuietShardedGradScaler")])
def test_mixed_precision_uses_fsdp_policy(ranks: list[dict], precision: str, dtype: str, scaler: str) -> None:
    for r in ranks:
        assert r[f"{precision}_compute_dtype"] == dtype  # parameters all-gathered in low precision
        assert r[f"{precision}_master_dtype"] == "torch.float32"  # the sharded master weights stay fp32
        assert r[f"{precision}_output_dtype"] == "torch.float32"
        assert r[f"{precision}_finite"]
        assert r[f"{precision}_steps"] == 3
        assert r[f"{precision}_scaler"] == scaler


def test_save_state_and_load_state_go_through_distributed_checkpoint(ranks: list[dict]) -> None:
    assert ranks[0]["dcp_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert ranks[0]["dcp_no_full_copies"]  # no gathered model.safetensors / optimizer.safetensors on the side
    for r in ranks:
        assert r["dcp_weights_restored"] == 0.0
        assert r["dcp_optimizer_restored"]
        assert r["dcp_optimizer_keys"] == ["exp_avg", "exp_avg_sq"]
