"""One rank of the 2-process checks of Accelerate's wider surface (``tests/accelerator/test_accelerate_surface_dist.py``).

Usage: ``surface_worker.py OUT_DIR``. Every check runs in this one launch and records what this rank saw in
``rank{r}.json``; the test asserts on it.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import stoker.utils as su  # noqa: E402
from stoker import Accelerator, DataLoaderConfiguration  # noqa: E402
from tests.helpers.dist_common import flat, write_result  # noqa: E402
from tests.helpers.models import make_mlp, make_regression_data  # noqa: E402

OUT = Path(sys.argv[1])
R: dict = {}


def grads(model: torch.nn.Module) -> list[float]:
    return [g for p in model.parameters() for g in p.grad.reshape(-1).tolist()]


def same_everywhere(values: list[float]) -> bool:
    return all(v == values for v in su.gather_object([values]))


def check_state_and_process_control(acc: Accelerator) -> None:
    R["state"] = {"distributed_type": acc.distributed_type, "old_name": acc.distributed_type == "DDPStrategy",
                  "use_distributed": acc.use_distributed, "is_last": acc.is_last_process,
                  "backend": acc.state.backend, "num_processes": acc.state.num_processes}
    pg = dist.distributed_c10d._get_default_group()
    R["timeout_s"] = pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        acc.on_main_process(print)("main")
        acc.on_last_process(print)("last")
        acc.on_local_main_process(print)("local")
        acc.on_process(process_index=1)(print)("one")
    R["printed"] = out.getvalue().split()
    other = Accelerator()  # a second Accelerator: its own trigger
    if acc.process_index == 1:
        acc.set_trigger()
    R["triggers"] = [other.check_trigger(), acc.check_trigger(), acc.check_trigger()]
    R["copy_state_equal"] = pickle.loads(pickle.dumps(acc)).state.__dict__ == acc.state.__dict__


def check_save_and_profile(acc: Accelerator) -> None:
    shared = OUT / "shared"
    if acc.is_main_process:
        shared.mkdir()
    acc.wait_for_everyone()
    acc.save({"rank": torch.tensor(acc.process_index)}, shared / "obj.pt")
    su.save({"rank": torch.tensor(acc.process_index)}, shared / "utils.pt")
    acc.wait_for_everyone()
    R["saved_rank"] = [int(torch.load(shared / n, weights_only=True)["rank"]) for n in ("obj.pt", "utils.pt")]
    with acc.profile(su.ProfileKwargs(activities=["cpu"], output_trace_dir=str(shared / "trace"))):
        torch.ones(2) @ torch.ones(2)
    R["traces"] = sorted(os.listdir(shared / "trace"))


def check_trigger_sync_in_backward(acc: Accelerator) -> None:
    model = acc.prepare(make_mlp(seed=0))
    losses = []
    for i in range(2):
        x = torch.full((4, 8), float(acc.process_index + i))
        with acc.no_sync(model):
            losses.append(model(x).pow(2).mean())
    acc.backward(losses[0])
    R["before_trigger_in_sync"] = same_everywhere(grads(model))
    with acc.trigger_sync_in_backward(model):
        acc.backward(losses[1])
    R["after_trigger_in_sync"] = same_everywhere(grads(model))


def check_join(acc_even: Accelerator) -> None:
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    model = acc.prepare(torch.nn.Linear(1, 1))
    loader = acc.prepare(DataLoader(TensorDataset(torch.arange(3.0)[:, None]), batch_size=1))
    steps = 0
    with acc.join_uneven_inputs([model]):  # rank 0 has 2 batches, rank 1 one: Join shadows the missing all-reduce
        for (x,) in loader:
            acc.backward(model(x).sum())
            steps += 1
    R["join_steps"] = steps
    acc.wait_for_everyone()
    even_loader = acc_even.prepare(DataLoader(TensorDataset(torch.arange(3.0)), batch_size=1))
    with acc_even.join_uneven_inputs([acc_even.prepare(torch.nn.Linear(1, 1))], even_batches=False):
        R["join_override"] = [even_loader.batch_sampler.even_batches, len(list(even_loader))]
    R["join_restored"] = even_loader.batch_sampler.even_batches


def ddp_run(handler: su.DistributedDataParallelKwargs) -> dict:
    acc = Accelerator(kwargs_handlers=[handler])
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 4), "unused": torch.nn.Linear(4, 4)})
    model.forward = lambda x: model["used"](x)  # noqa: E731 - one layer never takes part
    prepared = acc.prepare(model)
    x = torch.full((2, 4), 1.0 + acc.process_index / 3)
    acc.backward(prepared(x).pow(2).sum())
    g = model["used"].weight.grad.clone()
    acc.backward(prepared(x).pow(2).sum())  # raises without find_unused_parameters (a parameter never got a grad)
    return {"find_unused": prepared.find_unused_parameters, "bucket_bytes": prepared.bucket_bytes_cap,
            "in_sync": same_everywhere(g.reshape(-1).tolist()), "fp16_values": bool(torch.equal(g, g.half().float()))}


def check_ddp_kwargs() -> None:
    R["ddp_fp16_hook"] = ddp_run(su.DistributedDataParallelKwargs(find_unused_parameters=True, bucket_cap_mb=1,
                                                                  comm_hook="fp16"))
    R["ddp_no_hook"] = ddp_run(su.DistributedDataParallelKwargs(find_unused_parameters=True))


def check_sync_each_batch() -> None:
    R["sync_each_batch"] = accumulation_sync(su.GradientAccumulationPlugin(num_steps=2, sync_each_batch=True))
    R["sync_on_window_end"] = accumulation_sync(su.GradientAccumulationPlugin(num_steps=2))


def accumulation_sync(plugin: su.GradientAccumulationPlugin) -> list:
    acc = Accelerator(gradient_accumulation_plugin=plugin)
    model = acc.prepare(make_mlp(seed=0))
    loader = acc.prepare(DataLoader(make_regression_data(n=16), batch_size=4))
    in_sync = []
    for x, y in loader:
        with acc.accumulate(model):
            acc.backward(F.mse_loss(model(x), y))
            in_sync.append((acc.sync_gradients, same_everywhere(grads(model))))
    return in_sync


def check_fsdp_plugin() -> None:
    plugin = su.FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                               transformer_cls_names_to_wrap=["Linear"], reshard_after_forward=False)
    acc = Accelerator(fsdp_plugin=plugin)
    # Pickled before prepare: torch cannot pickle FSDP2's sharded modules themselves (their classes are made on
    # the fly), but the Accelerator and its strategy pickle.
    pickled = pickle.loads(pickle.dumps(acc)).state.__dict__ == acc.state.__dict__
    torch.manual_seed(0)
    model = acc.prepare(make_mlp(seed=0))
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = make_regression_data(n=8, seed=acc.process_index).tensors
    acc.backward(F.mse_loss(model(x), y))
    opt.step()
    from torch.distributed.fsdp import FSDPModule

    R["fsdp"] = {"type": acc.distributed_type, "sharded": [isinstance(m, FSDPModule) for m in model],
                 "weights_same": same_everywhere(flat(model)), "is_fsdp2": acc.state.is_fsdp2,
                 "pickled": pickled}


def check_utils(acc: Accelerator) -> None:
    rank = acc.process_index
    t = torch.tensor([float(rank + 1), float(rank + 3)])
    box = [rank, "x"] if rank == 1 else [None, None]
    su.set_seed(3, device_specific=True)
    drawn = torch.rand(1).item()
    torch.manual_seed(rank)
    su.synchronize_rng_states(["torch"])
    R["utils"] = {
        "gather": su.gather(t).tolist(), "gather_object": su.gather_object([rank]),
        "broadcast": su.broadcast(t.clone(), from_process=1).tolist(),
        "broadcast_object_list": su.broadcast_object_list(box, from_process=1),
        "reduce_mean": su.reduce(t).tolist(), "reduce_sum": su.reduce(t, "sum").tolist(),
        "reduce_max": su.reduce(t, "max").tolist(),
        "pad": su.pad_across_processes(torch.ones(rank + 1)).tolist(),
        "seed_differs": len(set(su.gather_object([drawn]))) == 2,
        "rng_synced": same_everywhere(torch.rand(3).tolist()),
        "tqdm_disabled": su.tqdm(range(2)).disable,
    }


def check_rng_types() -> None:
    draws = {}
    for types in (["generator"], ["torch", "generator"]):
        acc = Accelerator(rng_types=types)
        loader = acc.prepare(DataLoader(torch.arange(4.0), batch_size=1))
        torch.manual_seed(acc.process_index)  # the processes' global RNGs differ ...
        for _ in loader:  # ... until an iteration of a prepared loader starts (with rng_types=["torch"])
            break
        draws[types[0]] = same_everywhere(torch.rand(3).tolist())
    R["rng_types_synced"] = draws


def check_local_sgd_and_logger(acc: Accelerator) -> None:
    from stoker.local_sgd import LocalSGD

    model = acc.prepare(make_mlp(seed=0))
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    seen = []
    with LocalSGD(accelerator=acc, model=model, local_sgd_steps=2) as local_sgd:
        for step in range(3):
            x = torch.full((4, 8), float(acc.process_index + step))
            acc.backward(model(x).pow(2).mean())
            opt.step()
            opt.zero_grad()
            local_sgd.step()
            seen.append(same_everywhere(flat(model)))  # averaged every 2 steps only
    seen.append(same_everywhere(flat(model)))  # and when the block ends
    R["local_sgd_same"] = seen
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("surface").addHandler(handler)
    logger = su.get_logger("surface", log_level="INFO")
    logger.info("main only")
    logger.info(f"all {acc.process_index}", main_process_only=False)
    logger.info(f"ordered {acc.process_index}", main_process_only=False, in_order=True)
    R["logged"] = records


def main() -> None:
    # The first Accelerator joins the group: InitProcessGroupKwargs reaches init_process_group.
    acc = Accelerator(kwargs_handlers=[su.InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=77))])
    warnings.simplefilter("ignore")
    check_state_and_process_control(acc)
    check_save_and_profile(acc)
    check_trigger_sync_in_backward(acc)
    check_join(acc)
    check_ddp_kwargs()
    check_sync_each_batch()
    check_fsdp_plugin()
    check_utils(acc)
    check_rng_types()
    check_local_sgd_and_logger(acc)
    write_result(OUT, R)
    acc.end_training()


if __name__ == "__main__":
    main()
