"""The Accelerator's step makes no host-device sync in fp32/bf16 and exactly GradScaler's one in fp16.

Counted with ``tests/helpers/sync_counter.py`` over several optimizer steps of the seed tutorial's loop (accumulate,
backward, clip on sync steps, optimizer/scheduler step, zero_grad), epoch boundaries included, in one process and
in two (gloo, DDP). The GPU check (``benchmarks/gpu_check.py``) verifies the same with CUDA's sync-debug mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from stoker import Accelerator
from tests.helpers.dist_spawn import read_results, run_workers
from tests.helpers.sync_counter import SyncCounter
from tests.helpers.sync_loops import accelerator_loop

COUNTED = 6


def test_counter_counts_every_kind_of_sync_and_restores_torch() -> None:
    t = torch.ones(3)
    originals = (torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.to, torch.equal)
    with SyncCounter() as sync:
        t.sum().item()
        bool(t[0] > 0)
        if t[1]:
            pass
        t.tolist(), t.numpy(), t.cpu(), t.to("cpu"), float(t[0]), int(t[0]), torch.equal(t, t)
        f"{t.sum():.1f}"  # formatting reads the value (counted once, as its inner .item())
        t.to(torch.float64), t.to(t.device), t.to(device=t.device), t * 2  # stay on the device: not counted
    kinds = sync.by_kind()
    assert kinds == {"Tensor.item": 2, "Tensor.__bool__": 2, "Tensor.tolist": 1, "Tensor.numpy": 1,
                     "Tensor.cpu": 1, "Tensor.to(cpu)": 1, "Tensor.__float__": 1, "Tensor.__int__": 1,
                     "torch.equal": 1}, sync.report()
    assert all(e.site.endswith("in test_counter_counts_every_kind_of_sync_and_restores_torch") for e in sync.events)
    assert (torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.to, torch.equal) == originals
    assert not sync.active
    t.sum().item()
    assert sync.count == 11  # nothing counted after the block


def test_counter_counts_blocking_collectives_only() -> None:
    import torch.distributed as dist

    from tests.helpers.dist_spawn import free_port

    store = dist.TCPStore("127.0.0.1", free_port(), 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        t = torch.ones(2)
        with SyncCounter() as sync:
            dist.all_reduce(t)
            dist.barrier()
            dist.all_gather_object([None], 1)  # its inner tensor work is not counted again
            dist.all_reduce(t, async_op=True).wait()  # non-blocking: the wait is where a GPU would block, if read
    finally:
        dist.destroy_process_group()
    assert sync.by_kind() == {"dist.all_reduce": 1, "dist.barrier": 1, "dist.all_gather_object": 1}, sync.report()


def test_input_pipeline_and_optimizer_step_counters_are_host_work() -> None:
    """Samplers/collate, batch placement and Adam's CPU step counters run on the host on a GPU machine too."""
    counter, _ = accelerator_loop("no", warmup_steps=0, counted_steps=6)
    assert counter.count == 0, counter.report()
    counter, _ = accelerator_loop("no", warmup_steps=0, counted_steps=6, count_host_input=True)
    # The exclusions are what makes the count above zero, not a blind counter: here the sampler's index lists at
    # the epoch boundary and AdamW's reads of its CPU step counters show.
    assert counter.by_kind()["Tensor.item"] >= 6 * 4 and counter.by_kind()["Tensor.tolist"] >= 1, counter.report()


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_accelerator_loop_has_no_sync_per_step(precision: str, accumulate: int) -> None:
    counter, accelerator = accelerator_loop(precision, counted_steps=COUNTED, accumulate=accumulate)
    assert accelerator.step == 2 + COUNTED
    assert counter.count == 0, counter.report()


@pytest.mark.parametrize("fused", [False, True])
def test_fp16_pays_exactly_the_grad_scaler_sync(fused: bool) -> None:
    counter, accelerator = accelerator_loop("fp16", counted_steps=COUNTED)
    assert accelerator.step > 0
    assert counter.count == COUNTED, counter.report()  # one read of found_inf per optimizer step
    assert {e.kind for e in counter.events} == {"Tensor.item"}
    # A skipped step is still reported as skipped (the scheduler and step counter rely on it), fused or not.
    acc = Accelerator(mixed_precision="fp16")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), fused=True) if fused else torch.optim.SGD(model.parameters(), 0.1)
    model, opt = acc.prepare(model, opt)
    acc.precision.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    results = []
    for scale in (1.0, float("inf"), 1.0):
        with SyncCounter() as sync:
            acc.backward(model(torch.ones(1, 2)).sum() * scale)
            opt.step()
            opt.zero_grad()
        results.append((acc.optimizer_step_was_skipped, acc.step, sync.count))
    assert results == [(False, 1, 1), (True, 1, 1), (False, 2, 1)]


@pytest.mark.distributed
def test_accelerator_loop_sync_free_in_two_processes(tmp_path: Path) -> None:
    run_workers("sync_worker.py", [tmp_path], nprocs=2, timeout=120)
    for rank, result in enumerate(read_results(tmp_path)):
        for precision, expected in (("no", 0), ("bf16", 0), ("fp16", COUNTED)):
            got = result[precision]
            assert got["processes"] == 2 and got["strategy"] == "DDPStrategy"
            assert got["count"] == expected, f"rank {rank} {precision}: {got['report']}"
