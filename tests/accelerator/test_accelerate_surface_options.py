"""Accelerate's constructor options in one process: kwargs handlers, plugins, ``split_batches``, ``rng_types``,
``dynamo_backend``; each either takes effect (checked on the object it configures) or fails with a clear error.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.nn.functional as F

from stoker import Accelerator
from stoker.accelerator.distributed.fsdp import FSDPStrategy
from stoker.compat.accelerate.options import AcceleratorOptions
from stoker.utils import (AutocastKwargs, DataLoaderConfiguration, DeepSpeedPlugin, DistributedDataParallelKwargs,
                          FullyShardedDataParallelPlugin, GradientAccumulationPlugin, GradScalerKwargs,
                          InitProcessGroupKwargs, ProfileKwargs, TorchDynamoPlugin)
from tests.helpers.models import make_loader, make_mlp, make_regression_data
from tests.helpers.weights import params_of


def test_kwargs_handlers_keep_only_what_differs_from_accelerates_defaults() -> None:
    assert DistributedDataParallelKwargs().to_kwargs() == {}
    assert DistributedDataParallelKwargs(find_unused_parameters=True, bucket_cap_mb=5, comm_hook="fp16").to_kwargs() \
        == {"find_unused_parameters": True, "bucket_cap_mb": 5}
    assert GradScalerKwargs(init_scale=8.0).to_kwargs() == {"init_scale": 8.0}
    assert InitProcessGroupKwargs().timeout == timedelta(minutes=10)
    assert InitProcessGroupKwargs(backend="gloo").to_kwargs() == {"backend": "gloo", "timeout": timedelta(minutes=30)}
    with pytest.raises(ValueError, match="not a hook"):
        DistributedDataParallelKwargs(comm_hook="zip")
    with pytest.raises(ValueError, match="not a wrapper"):
        DistributedDataParallelKwargs(comm_hook="power_sgd", comm_wrapper="power_sgd")


def test_handlers_reach_the_strategy_they_configure() -> None:
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True, static_graph=True, comm_hook="bf16")
    init = InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=30))
    group, ddp_options = AcceleratorOptions(kwargs_handlers=[ddp, init]).strategy_options()
    assert group == {"backend": "gloo", "timeout": timedelta(seconds=30)}
    assert ddp_options == {"find_unused_parameters": True, "static_graph": True, "comm_hook": ddp.register_comm_hook}
    from stoker import DDPStrategy
    from stoker.compat.accelerate.options import _configure_object

    strategy = DDPStrategy(bucket_cap_mb=1)  # the user's own object: its settings win, the handler's are added
    _configure_object(strategy, group, ddp_options)
    assert strategy.ddp_kwargs == {"find_unused_parameters": True, "static_graph": True, "bucket_cap_mb": 1}
    assert strategy.backend == "gloo" and strategy.timeout == timedelta(seconds=30)
    assert strategy.comm_hook == ddp.register_comm_hook
    # One process: "auto" is a single device and the DDP handler has nothing to configure.
    assert Accelerator(cpu=True, kwargs_handlers=[ddp, init]).distributed_type == "NO"


def test_handler_errors_and_accelerates_own_handler_objects() -> None:
    with pytest.raises(ValueError, match="two GradScalerKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[GradScalerKwargs(), GradScalerKwargs()])
    with pytest.raises(TypeError, match="does not support.*Supported: DistributedDataParallelKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[object()])
    with pytest.raises(TypeError, match="must be a list"):
        Accelerator(cpu=True, kwargs_handlers=GradScalerKwargs())
    from accelerate.utils import GradScalerKwargs as AccelerateScalerKwargs

    accelerator = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[AccelerateScalerKwargs(init_scale=4.0)])
    assert accelerator.precision.scaler.get_scale() == 4.0


def test_grad_scaler_kwargs_configure_the_fp16_scaler_only() -> None:
    handler = GradScalerKwargs(init_scale=1024.0, growth_interval=1)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[handler])
    model = make_mlp()
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert accelerator.precision.scaler.get_scale() == 1024.0
    accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())
    opt.step()
    accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())  # the deferred update: grows after 1 good step
    assert accelerator.precision.scaler.get_scale() == 2048.0
    bf16 = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[handler])  # no scaler: ignored
    assert getattr(bf16.precision, "scaler", None) is None


def test_autocast_kwargs_turn_autocast_off_in_forward_and_in_autocast() -> None:
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(torch.is_autocast_enabled("cpu"))
            return x

    on = Accelerator(cpu=True, mixed_precision="bf16")
    off = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(enabled=False)])
    on.prepare(Probe())(torch.ones(1))
    off.prepare(Probe())(torch.ones(1))
    with off.autocast():
        seen.append(torch.is_autocast_enabled("cpu"))
    with on.autocast(autocast_handler=AutocastKwargs(enabled=False)):
        seen.append(torch.is_autocast_enabled("cpu"))
    with on.autocast():
        seen.append(torch.is_autocast_enabled("cpu"))
    assert seen == [True, False, False, False, True]


def test_split_batches_and_gradient_accumulation_plugin() -> None:
    assert Accelerator(cpu=True, split_batches=True).dataloader_config.split_batches is True
    assert Accelerator(cpu=True, split_batches=True).split_batches is True
    with pytest.raises(ValueError, match="contradicts"):
        Accelerator(cpu=True, split_batches=True, dataloader_config=DataLoaderConfiguration(split_batches=False))
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=3))
    assert accelerator.gradient_accumulation_steps == 3 and accelerator.gradient_state.num_steps == 3
    assert accelerator.gradient_state.sync_each_batch is False
    with pytest.raises(ValueError, match="both gradient_accumulation_steps and gradient_accumulation_plugin"):
        Accelerator(cpu=True, gradient_accumulation_steps=2,
                    gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2))
    # adjust_scheduler=False is Accelerate's no-op (its schedulers never count micro-steps either way): accepted
    assert GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False).adjust_scheduler is False
    with pytest.raises(TypeError, match="adjust_scheduler"):
        GradientAccumulationPlugin(num_steps=2, adjust_scheduler="no")
    with pytest.raises(ValueError, match="num_steps"):
        GradientAccumulationPlugin()


@pytest.mark.parametrize("adjust", [True, False])
def test_adjust_scheduler_either_way_steps_schedulers_once_per_applied_step(adjust: bool) -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=adjust)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for _ in range(6):  # 3 windows of 2 micro-batches
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(4, 2)).pow(2).mean())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    assert scheduler.scheduler._step_count == 1 + 3 and scheduler.get_last_lr() == [0.1 * 0.5 ** 3]


def test_rng_types_are_validated() -> None:
    assert Accelerator(cpu=True)._options.rng_types == ["generator"]
    assert Accelerator(cpu=True, rng_types=["torch", "generator"])._options.rng_types == ["torch", "generator"]
    with pytest.raises(ValueError, match="not RNG types"):
        Accelerator(cpu=True, rng_types=["dice"])


def test_deepspeed_is_refused_with_a_pointer_to_fsdp() -> None:
    with pytest.raises(ValueError, match="DeepSpeed is not supported.*fsdp"):
        Accelerator(cpu=True, deepspeed_plugin={"zero_stage": 3})
    with pytest.raises(ValueError, match="FSDP instead"):
        DeepSpeedPlugin(zero_stage=2)


def test_fsdp_plugin_maps_shared_options_onto_the_fsdp2_strategy() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    plugin = FullyShardedDataParallelPlugin(
        sharding_strategy="SHARD_GRAD_OP", auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"], mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "fp32"},
        cpu_offload=True, use_orig_params=True, state_dict_type="SHARDED_STATE_DICT", fsdp_version=2)
    strategy = plugin.to_strategy({"backend": "gloo"})
    assert isinstance(strategy, FSDPStrategy) and strategy.reshard_after_forward is False
    assert strategy.backend == "gloo" and isinstance(strategy.fsdp_kwargs["offload_policy"], CPUOffloadPolicy)
    assert strategy.mixed_precision == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    class Block(torch.nn.Linear):
        pass

    root = torch.nn.Sequential(Block(2, 2), torch.nn.Linear(2, 2))
    assert [strategy.policy(m, n, root) for n, m in root.named_children()] == [True, False]
    sized = FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap", min_num_params=5).to_strategy()
    assert [sized.policy(m, n, root) for n, m in root.named_children()] == [True, True]  # 6 parameters each
    assert FullyShardedDataParallelPlugin(reshard_after_forward=True).to_strategy().reshard_after_forward is True
    assert FullyShardedDataParallelPlugin().to_strategy().reshard_after_forward is None  # torch's default


@pytest.mark.parametrize("field, value, message", [
    ("sharding_strategy", "NO_SHARD", "NO_SHARD is plain DDP"),
    ("fsdp_version", 1, "FSDP2"),
    ("state_dict_type", "FULL_STATE_DICT", "save_model"),
    ("activation_checkpointing", True, "torch.utils.checkpoint"),
    ("sync_module_states", True, "set_seed"),
    ("auto_wrap_policy", "transformer_based_wrap", "transformer_cls_names_to_wrap"),
    ("auto_wrap_policy", lambda module, recurse, nonwrapped_numel: True, "FSDP1 policies"),
    ("mixed_precision_policy", {"buffer_dtype": "bf16"}, "buffers keep their dtype"),
])
def test_fsdp_plugin_refuses_what_fsdp2_does_not_share(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FullyShardedDataParallelPlugin(**{field: value})


def test_fsdp_plugin_must_not_contradict_the_strategy_argument() -> None:
    with pytest.raises(ValueError, match="the plugin asks for FSDP"):
        Accelerator(cpu=True, strategy="ddp", fsdp_plugin=FullyShardedDataParallelPlugin())
    with pytest.raises(TypeError, match="FullyShardedDataParallelPlugin"):
        Accelerator(cpu=True, fsdp_plugin={"reshard_after_forward": True})


def test_dynamo_backend_compiles_prepared_models_and_unwrap_returns_the_original() -> None:
    assert TorchDynamoPlugin().compile_kwargs() is None
    assert TorchDynamoPlugin(backend="inductor", mode="max-autotune").compile_kwargs() == {
        "backend": "inductor", "fullgraph": False, "mode": "max-autotune"}
    with pytest.raises(ValueError, match="not a torch.compile backend"):
        Accelerator(cpu=True, dynamo_backend="warp-drive")
    with pytest.raises(ValueError, match="both dynamo_backend and dynamo_plugin"):
        Accelerator(cpu=True, dynamo_backend="eager", dynamo_plugin=TorchDynamoPlugin())
    results = []
    for backend in (None, "eager"):
        accelerator = Accelerator(cpu=True, dynamo_backend=backend)
        model = make_mlp(seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prepared, opt, loader = accelerator.prepare(model, opt, make_loader(make_regression_data(n=16), batch_size=8))
        assert (type(prepared).__name__ == "OptimizedModule") == (backend == "eager")
        assert accelerator.unwrap_model(prepared) is model
        assert accelerator.state.dynamo_plugin is accelerator._options.dynamo
        for x, y in loader:
            accelerator.backward(F.mse_loss(prepared(x), y))
            opt.step()
            opt.zero_grad()
        results.append(params_of(model))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the eager backend runs the same kernels


def test_profile_kwargs_are_what_profile_uses_by_default() -> None:
    handler = ProfileKwargs(record_shapes=True)
    assert Accelerator(cpu=True, kwargs_handlers=[handler])._options.profile is handler
