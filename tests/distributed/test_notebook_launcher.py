"""``notebook_launcher`` / ``debug_launcher``: a function (here defined inside the test, as in a notebook cell, so
only "fork" can run it) trains in two forked processes of this one; results come back through files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from stoker import Accelerator, debug_launcher, notebook_launcher
from stoker.accelerator import WorkerError

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 3, generator=g), torch.randn(32, 1, generator=g)


def _model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Linear(3, 1)


def test_two_processes_train_as_one_over_the_same_global_batches(tmp_path: Path) -> None:
    x, y = _data()

    def train(out: Path) -> None:  # a closure: it cannot be pickled, so this needs "fork"
        accelerator = Accelerator()
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for step, (bx, by) in enumerate(loader):
            if step == 2:
                break
            loss = F.mse_loss(model(bx), by)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        weights = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        torch.save({"processes": accelerator.num_processes, "rank": accelerator.process_index,
                    "world": os.environ["WORLD_SIZE"], "local": os.environ["LOCAL_RANK"], "pid": os.getpid(),
                    "weights": weights}, out / f"rank{accelerator.process_index}.pt")

    notebook_launcher(train, (tmp_path,), num_processes=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert [(r["processes"], r["rank"], r["world"], r["local"]) for r in ranks] == [(2, 0, "2", "0"), (2, 1, "2", "1")]
    assert all(not os.path.exists(f"/proc/{r['pid']}") for r in ranks) and ranks[0]["pid"] != os.getpid()
    # one process, batches of 8 (each rank read 4 of them: DDP averages the two halves' gradients)
    reference = _model()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(2):
        F.mse_loss(reference(x[8 * step:8 * step + 8]), y[8 * step:8 * step + 8]).backward()
        optimizer.step()
        optimizer.zero_grad()
    for name, want in reference.state_dict().items():
        torch.testing.assert_close(ranks[0]["weights"][name], ranks[1]["weights"][name], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0]["weights"][name], want, rtol=1e-6, atol=1e-7)
        assert not torch.equal(want, _model().state_dict()[name])  # it trained


def test_an_exception_in_rank_one_is_raised_in_the_caller_and_the_others_are_stopped(tmp_path: Path) -> None:
    def train(out: Path) -> None:
        accelerator = Accelerator()
        (out / f"pid{accelerator.process_index}").write_text(str(os.getpid()))
        if accelerator.process_index == 1:
            raise KeyError("rank one is broken")
        accelerator.wait_for_everyone()  # rank 0 waits for a rank that never comes
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(KeyError, match="rank one is broken") as raised:
        notebook_launcher(train, (tmp_path,), num_processes=2)
    assert time.monotonic() - started < 30
    cause = raised.value.__cause__
    assert isinstance(cause, WorkerError) and "rank 1 of 2" in str(cause) and "in train" in str(cause)
    for rank in (0, 1):
        assert not os.path.exists(f"/proc/{(tmp_path / f'pid{rank}').read_text()}")


def test_mixed_precision_reaches_the_workers_and_one_process_runs_here(tmp_path: Path) -> None:
    def report(out: Path) -> None:
        accelerator = Accelerator()
        (out / f"{accelerator.process_index}-of-{accelerator.num_processes}").write_text(
            f"{accelerator.mixed_precision} {os.getpid()}")

    notebook_launcher(report, (tmp_path,), num_processes=2, mixed_precision="bf16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-of-2", "1-of-2"]
    assert (tmp_path / "1-of-2").read_text().split()[0] == "bf16"
    for p in tmp_path.iterdir():
        p.unlink()
    notebook_launcher(report, (tmp_path,), num_processes=1, mixed_precision="bf16")
    assert (tmp_path / "0-of-1").read_text() == f"bf16 {os.getpid()}"  # in this very process
    assert "STOKER_MIXED_PRECISION" not in os.environ and "ACCELERATE_MIXED_PRECISION" not in os.environ


def test_debug_launcher_runs_on_cpu_processes(tmp_path: Path) -> None:
    def check(out: Path) -> None:
        accelerator = Accelerator()
        total = accelerator.reduce(torch.tensor([float(accelerator.process_index + 1)]), "sum")
        (out / str(accelerator.process_index)).write_text(f"{accelerator.device.type} {total.item()}")

    debug_launcher(check, (tmp_path,))
    assert [(tmp_path / r).read_text() for r in ("0", "1")] == ["cpu 3.0", "cpu 3.0"]


def test_max_restarts_starts_the_group_again(tmp_path: Path) -> None:
    def flaky(out: Path) -> None:
        marker = out / "failed-once"
        if os.environ["RANK"] == "1" and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("first try fails")
        (out / f"done{os.environ['RANK']}").write_text("ok")

    with pytest.raises(RuntimeError, match="first try fails"):
        notebook_launcher(flaky, (tmp_path,), num_processes=2)
    (tmp_path / "again").mkdir()
    notebook_launcher(flaky, (tmp_path / "again",), num_processes=2, max_restarts=1)
    assert (tmp_path / "again" / "done1").exists() and (tmp_path / "again" / "done0").exists()


_NODE = """
import os, sys, torch
from stoker import Accelerator, notebook_launcher

def report(out):
    accelerator = Accelerator()
    total = accelerator.reduce(torch.tensor([float(accelerator.process_index)]), "sum").item()
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    with open(os.path.join(out, os.environ["RANK"]), "w") as f:
        f.write(" ".join([os.environ[k] for k in keys] + [str(accelerator.num_processes), str(total)]))

notebook_launcher(report, (sys.argv[1],), num_processes=2, num_nodes=2, node_rank=int(sys.argv[2]),
                  use_port=sys.argv[3])
"""


def test_two_nodes_meet_at_master_addr_and_use_port(tmp_path: Path) -> None:
    import subprocess
    import sys

    from stoker.accelerator import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("WORLD_SIZE", None)
    port = str(free_port())
    nodes = [subprocess.Popen([sys.executable, "-c", _NODE, str(tmp_path), str(node), port], env=env)
             for node in (0, 1)]
    assert [node.wait(timeout=100) for node in nodes] == [0, 0]
    # rank, local rank, world, local world, node; every rank saw 4 processes and the sum 0+1+2+3
    assert [(tmp_path / str(r)).read_text() for r in range(4)] == [
        "0 0 4 2 0 4 6.0", "1 1 4 2 0 4 6.0", "2 0 4 2 1 4 6.0", "3 1 4 2 1 4 6.0"]


def test_a_process_group_left_open_here_is_refused_before_forking() -> None:
    # Forked workers would inherit it (and its store) instead of forming their own group: they would hang
    import torch.distributed as dist

    from stoker.accelerator.distributed.spawn import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="still has a torch.distributed process group open"):
            notebook_launcher(print, ("never",), num_processes=2)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()
