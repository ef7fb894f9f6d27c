"""Accelerate's wider Accelerator surface in one process: state views, properties, triggers, decorators, ``save``,
state hooks, profiling, pickling and ``free_memory``. (Constructor options: ``test_accelerate_surface_options.py``;
two processes: ``test_accelerate_surface_dist.py``.)
"""

from __future__ import annotations

import json
import os
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.utils.data import DataLoader

from stoker import Accelerator, DistributedType
from stoker.compat.accelerate.state import AcceleratorState, GradientState, PartialState
from tests.helpers.models import make_loader, make_mlp, make_regression_data


def test_each_accelerator_has_its_own_state_and_gradient_state() -> None:
    a, b = Accelerator(cpu=True), Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=3)
    assert a.state is not b.state and a.gradient_state is not b.gradient_state
    assert (a.state.mixed_precision, b.state.mixed_precision) == ("no", "bf16")
    assert (a.gradient_state.num_steps, b.gradient_state.num_steps) == (1, 3)
    a.state.set_trigger()  # a flag raised on one Accelerator is not seen by the other
    assert b.check_trigger() is False and a.check_trigger() is True
    s = a.state
    assert (s.device, s.process_index, s.local_process_index, s.num_processes) == (torch.device("cpu"), 0, 0, 1)
    assert s.is_main_process and s.is_local_main_process and s.is_last_process and not s.use_distributed
    assert "Distributed environment: NO" in repr(s) and "Mixed precision type: no" in repr(s)


def test_distributed_type_is_accelerates_enum_and_still_equals_the_old_strategy_name() -> None:
    accelerator = Accelerator(cpu=True)
    kind = accelerator.distributed_type
    assert kind is DistributedType.NO and kind == "NO" and json.dumps(kind) == '"NO"'
    assert kind == "SingleDevice" and kind != "DDPStrategy" and not (kind != "SingleDevice")
    assert DistributedType.MULTI_CPU == "DDPStrategy" and DistributedType.MULTI_GPU == "DDPStrategy"
    assert DistributedType.FSDP == "FSDPStrategy" and DistributedType.FSDP != "SingleDevice"
    assert kind in (DistributedType.NO, DistributedType.XLA) and kind not in (DistributedType.MULTI_CPU,)
    assert len({DistributedType.NO, "NO"}) == 1  # hashes like its value
    from accelerate.utils import DistributedType as AccelerateType  # a ported script may still compare to it

    assert kind == AccelerateType.NO and kind != AccelerateType.MULTI_GPU


def test_accelerate_properties() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    assert accelerator.native_amp and not Accelerator(cpu=True).native_amp
    assert accelerator.is_last_process and accelerator.use_distributed is False
    assert accelerator.split_batches is False and accelerator.even_batches is True
    accelerator.even_batches = False
    assert accelerator.dataloader_config.even_batches is False
    assert accelerator.dispatch_batches in (None, False)  # accepted; stoker's loaders never dispatch


def test_assigning_a_dataloader_config_applies_to_loaders_prepared_afterwards() -> None:
    # Accelerate's own test script swaps the configuration on a live Accelerator this way.
    from stoker import DataLoaderConfiguration

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(6))

    accelerator = Accelerator(cpu=True)
    accelerator.dataloader_config = DataLoaderConfiguration(use_stateful_dataloader=True, even_batches=False)
    loader = accelerator.prepare(DataLoader(Stream(), batch_size=2))
    assert type(loader.base_loader).__name__ == "StatefulDataLoader" and accelerator.even_batches is False


def test_gradient_state_follows_the_window_and_the_active_loader() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = accelerator.prepare(make_mlp())
    outer, inner = accelerator.prepare(make_loader(make_regression_data(n=24), batch_size=8),
                                       make_loader(make_regression_data(n=16), batch_size=8))
    gs = accelerator.gradient_state
    assert gs.active_dataloader is None and not gs.in_dataloader and not gs.end_of_dataloader
    seen = []
    for i, (x, y) in enumerate(outer):
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
            seen.append((gs.active_dataloader is outer, gs.end_of_dataloader, gs.sync_gradients))
        if i == 0:
            inner_seen = [(gs.active_dataloader is inner, gs.end_of_dataloader) for _ in inner]
            assert inner_seen == [(True, False), (True, True)]
            assert gs.active_dataloader is outer and gs.dataloader_references == [None, outer]
    assert seen == [(True, False, False), (True, False, True), (True, True, True)]
    assert gs.active_dataloader is None
    GradientState._reset_state()  # nothing global to reset: the Accelerator keeps working
    assert accelerator.gradient_state.num_steps == 2


def test_partial_and_accelerator_state_on_their_own() -> None:
    state = PartialState(cpu=True)
    assert state.distributed_type is DistributedType.NO and state.num_processes == 1
    with state.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]
    assert AcceleratorState(mixed_precision="fp16", cpu=True).mixed_precision == "fp16"
    AcceleratorState._reset_state()
    with pytest.raises(TypeError, match="backend/timeout"):
        PartialState(cpu=True, init_method="tcp://")
    with pytest.raises(ValueError, match="not a precision"):
        AcceleratorState(mixed_precision="fp17")


def test_triggers_reset_after_they_are_seen() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False


def test_process_decorators_in_one_process(capsys: pytest.CaptureFixture) -> None:
    accelerator = Accelerator(cpu=True)

    @accelerator.on_main_process
    def main_only(x: int) -> int:
        return x + 1

    @accelerator.on_process(process_index=0)
    def first(x: int) -> int:
        return x * 2

    assert main_only(1) == 2 and first(4) == 8 and main_only.__name__ == "main_only"
    # In one process every decorator runs the function, whatever index it names (Accelerate's rule).
    assert accelerator.on_process(lambda: "ran", process_index=3)() == "ran"
    assert accelerator.on_last_process(lambda: "last")() == "last"
    assert accelerator.on_local_main_process(lambda: "local")() == "local"
    with pytest.raises(TypeError, match="decorates a function"):
        accelerator.on_main_process()
    with pytest.raises(ValueError, match="process index"):
        accelerator.on_process(lambda: None, process_index=-1)


def test_save_writes_torch_or_safetensors_atomically(tmp_path) -> None:
    accelerator = Accelerator(cpu=True)
    obj = {"step": 3, "weights": torch.arange(4.0)}
    accelerator.save(obj, tmp_path / "obj.pt")
    loaded = torch.load(tmp_path / "obj.pt", weights_only=True)
    assert loaded["step"] == 3 and torch.equal(loaded["weights"], obj["weights"])
    state = make_mlp().state_dict()
    accelerator.save(state, str(tmp_path / "model.safetensors"), safe_serialization=True)
    assert all(torch.equal(v, state[k]) for k, v in load_file(tmp_path / "model.safetensors").items())
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors", "obj.pt"]  # no temporary file left
    with pytest.raises(TypeError, match="flat dict of tensors"):
        accelerator.save({"step": 3}, tmp_path / "bad.safetensors", safe_serialization=True)
    assert not (tmp_path / "bad.safetensors").exists()


def test_save_state_hooks_can_take_over_a_model(tmp_path) -> None:
    accelerator = Accelerator(cpu=True)
    first, second = accelerator.prepare(make_mlp(seed=1), make_mlp(seed=2))
    calls = []

    def save_hook(models, weights, output_dir):
        calls.append(("save", len(models), len(weights), os.path.basename(output_dir)))
        torch.save(weights.pop(0), os.path.join(output_dir, "first.pt"))  # saved its own way

    def load_hook(models, input_dir):
        calls.append(("load", len(models)))
        models.pop(0).load_state_dict(torch.load(os.path.join(input_dir, "first.pt"), weights_only=True))

    handles = [accelerator.register_save_state_pre_hook(save_hook),
               accelerator.register_load_state_pre_hook(load_hook)]
    expected = [p.detach().clone() for m in (first, second) for p in m.parameters()]
    path = accelerator.save_state(tmp_path / "ckpt")
    with torch.no_grad():
        for p in list(first.parameters()) + list(second.parameters()):
            p.zero_()
    accelerator.load_state(path)
    assert all(torch.equal(p, e) for p, e in zip([p for m in (first, second) for p in m.parameters()], expected))
    assert [c[0] for c in calls] == ["save", "load"] and calls[0][1:3] == (2, 2) and calls[1][1] == 2
    assert "first.pt" in os.listdir(path) and "model.safetensors" in os.listdir(path)
    assert "model_1.safetensors" not in os.listdir(path)  # model_{i} numbers what the hook left
    for handle in handles:
        handle.remove()
    calls.clear()
    accelerator.save_state(tmp_path / "ckpt2")
    assert calls == []
    with pytest.raises(TypeError, match="callable"):
        accelerator.register_save_state_pre_hook("not a function")


@pytest.mark.slow  # torch.profiler's first start takes seconds (kineto's initialisation)
def test_profile_records_and_writes_a_chrome_trace(tmp_path) -> None:
    from stoker.utils import ProfileKwargs

    model = make_mlp()
    traces = []
    handler = ProfileKwargs(activities=["cpu"], schedule_option={"wait": 1, "warmup": 1, "active": 1, "repeat": 1},
                            on_trace_ready=lambda p: traces.append({e.key for e in p.key_averages()}),
                            output_trace_dir=str(tmp_path / "trace"))
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    with accelerator.profile() as prof:  # the handler from kwargs_handlers
        for _ in range(4):
            model(torch.randn(4, 8))
            prof.step()
    assert len(traces) == 1 and any("addmm" in key or "linear" in key for key in traces[0])
    assert os.listdir(tmp_path / "trace") == ["profile_0.json"]
    with pytest.raises(ValueError, match="not a profiler activity"):
        ProfileKwargs(activities=["tpu"]).build()


def test_verify_device_map_trigger_sync_and_join_in_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    model = make_mlp()
    assert accelerator.verify_device_map(model) is False
    model[0].hf_device_map = {"a": 0, "b": 1}
    assert accelerator.verify_device_map(model) is True
    with accelerator.trigger_sync_in_backward(model):
        model(torch.randn(2, 8)).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one process: no "only supported" warning
        with accelerator.join_uneven_inputs([model], even_batches=False) as joined:
            assert joined == [model]


def test_free_memory_forgets_prepared_objects_and_restarts_the_step_count() -> None:
    accelerator = Accelerator(cpu=True)
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    accelerator.backward(model(torch.randn(2, 8)).sum())
    opt.step()
    assert accelerator.step == 1
    assert accelerator.free_memory(model, opt) == [None, None]
    assert accelerator.step == 0 and accelerator._models == [] and accelerator._optimizers == []
    assert accelerator.clear() == []


def test_the_accelerator_pickles_with_its_state(tmp_path) -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    loader = accelerator.prepare(DataLoader(torch.arange(8.0), batch_size=4))
    accelerator.register_save_state_pre_hook(lambda *args: None)
    accelerator.save_state(tmp_path / "ckpt")  # makes the background checkpoint worker (not pickled)
    copy = pickle.loads(pickle.dumps(accelerator))
    assert copy.state.__dict__ == accelerator.state.__dict__
    assert copy.gradient_accumulation_steps == 2 and copy.gradient_state.num_steps == 2
    assert [b.tolist() for b in copy._dataloaders[0]] == [b.tolist() for b in loader]
