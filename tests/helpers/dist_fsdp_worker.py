"""One rank of the 2-process FSDP2 checks (``tests/distributed/test_fsdp.py``). Usage: ``dist_fsdp_worker.py OUT``.

Trains the same model from the same weights on the same shards with DDP and with FSDP2 and records the
weights, clip norms and what sharding did; then mixed precision, export and sharded checkpoints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from stoker import Accelerator, load_checkpoint_in_model, set_seed
from stoker.accelerator.distributed.fsdp import FSDPStrategy
from tests.helpers.models import make_regression_data

OUT = Path(sys.argv[1])
RANK = common.rank()


class Net(nn.Module):
    """A stem, two blocks in a ModuleList (the default policy shards each) and a head."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            self.stem = nn.Linear(8, 16)
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(2)])
            self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def train(strategy: str | FSDPStrategy, optimizer_first: bool, precision: str = "no",
          steps_out: list | None = None) -> tuple[Accelerator, nn.Module, object]:
    set_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, strategy=strategy, mixed_precision=precision)
    model = Net()
    loader = DataLoader(make_regression_data(n=32), batch_size=4, shuffle=True)

    def make_opt(m: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(m.parameters(), lr=0.05, weight_decay=0.01)

    if optimizer_first:  # built on the unsharded parameters: prepare must remap it
        opt = make_opt(model)
        model, opt, loader = accelerator.prepare(model, opt, loader)
    else:
        model, loader = accelerator.prepare(model, loader)
        opt = accelerator.prepare(make_opt(model))
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
                if norm is not None and steps_out is not None:
                    steps_out.append(float(norm))
                opt.step()
                opt.zero_grad()
    return accelerator, model, opt


def check_parity(result: dict) -> None:
    ddp_norms: list = []
    ddp_acc, ddp_model, _ = train("ddp", True, steps_out=ddp_norms)
    ddp_weights = common.flat(ddp_acc.unwrap_model(ddp_model))
    fsdp_norms: list = []
    acc, model, _ = train("fsdp", True, steps_out=fsdp_norms)
    result["fsdp_type"] = acc.distributed_type
    result["sharded_modules"] = sorted(n or "<root>" for n, m in model.named_modules()
                                       if type(m).__name__.startswith("FSDP"))
    result["param_types"] = sorted({type(p.data).__name__ for p in model.parameters()})
    local = model.stem.weight.to_local()
    result["local_shard_rows"] = int(local.shape[0])
    result["parity_opt_first"] = common.max_diff(common.flat(model), ddp_weights)
    result["norm_diff"] = common.max_diff(fsdp_norms, ddp_norms)
    result["num_norms"] = len(fsdp_norms)
    result["unwrap_is_model"] = acc.unwrap_model(model) is model
    _, model_b, _ = train(FSDPStrategy(auto_wrap_policy={"Linear"}), False)
    result["parity_opt_after"] = common.max_diff(common.flat(model_b), ddp_weights)
    result["policy_classes"] = sorted(n or "<root>" for n, m in model_b.named_modules()
                                      if type(m).__name__.startswith("FSDP"))
    # save_model: the full state dict gathered on the main process, written once.
    export = OUT / "shared" / "export"
    acc.save_model(model, export)
    result["export_files"] = sorted(os.listdir(export))
    plain = Net()
    load_checkpoint_in_model(plain, str(export))
    result["export_matches"] = common.max_diff(common.flat(plain), common.flat(model))
    result["state_dict_keys_main"] = len(acc.get_state_dict(model))


def check_mixed_precision(result: dict) -> None:
    for precision in ("bf16", "fp16"):
        seen = []
        acc = Accelerator(cpu=True, strategy="fsdp", mixed_precision=precision)
        model = Net()
        model.head.register_forward_pre_hook(lambda m, args: seen.append(str(m.weight.dtype)))
        model = acc.prepare(model)
        opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.01))
        g = torch.Generator().manual_seed(RANK)
        losses = []
        for _ in range(3):
            out = model(torch.randn(4, 8, generator=g))
            loss = out.float().pow(2).mean()
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        result[f"{precision}_compute_dtype"] = seen[0]
        result[f"{precision}_output_dtype"] = str(out.dtype)
        result[f"{precision}_master_dtype"] = str(next(model.parameters()).dtype)
        result[f"{precision}_finite"] = all(abs(v) < 1e6 for v in losses)
        result[f"{precision}_steps"] = acc.step
        result[f"{precision}_scaler"] = type(getattr(acc.precision, "scaler", None)).__name__


def check_sharded_state(result: dict) -> None:
    acc, model, opt = train("fsdp", False)
    folder = OUT / "shared" / "fsdp_ckpt"
    acc.save_state(folder)  # models and optimizers through torch.distributed.checkpoint
    saved = common.flat(model)
    saved_state = {k: v.to_local().clone() for k, v in opt.state_dict()["state"][0].items() if hasattr(v, "to_local")}
    with torch.no_grad():  # wreck the weights and the optimizer state, then load
        for p in model.parameters():
            p.add_(1.0)
    opt.optimizer.state.clear()
    acc.load_state(folder)
    result["dcp_files"] = sorted(n for n in os.listdir(folder) if n.endswith(".distcp") or n == ".metadata")
    result["dcp_no_full_copies"] = not any(n.startswith(("model", "optimizer")) for n in os.listdir(folder))
    result["dcp_weights_restored"] = common.max_diff(common.flat(model), saved)
    restored = opt.state_dict()["state"][0]
    result["dcp_optimizer_restored"] = all(torch.equal(restored[k].to_local(), v) for k, v in saved_state.items())
    result["dcp_optimizer_keys"] = sorted(saved_state)


def main() -> None:
    (OUT / "shared").mkdir(exist_ok=True)
    result: dict = {}
    check_parity(result)
    check_mixed_precision(result)
    check_sharded_state(result)
    common.write_result(OUT, result)
    # The user destroys the group the Accelerator created: its teardown at exit must not trip over that.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
