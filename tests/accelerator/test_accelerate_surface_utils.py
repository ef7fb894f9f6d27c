"""``stoker.utils``: the ``accelerate.utils`` names scripts import, in one process (two: ``..._dist.py``)."""

from __future__ import annotations

import json

import pytest
import torch

import stoker.utils as su
from tests.helpers.dist_spawn import base_env
from tests.helpers.forkserver import run_python
from tests.helpers.models import make_mlp

NAMES = ("DistributedDataParallelKwargs", "GradScalerKwargs", "InitProcessGroupKwargs", "AutocastKwargs",
         "ProfileKwargs", "set_seed", "ProjectConfiguration", "DataLoaderConfiguration", "send_to_device", "gather",
         "gather_object", "broadcast", "broadcast_object_list", "reduce", "pad_across_processes",
         "find_executable_batch_size", "release_memory", "tqdm", "LoggerType", "DistributedType",
         "extract_model_from_parallel", "load_checkpoint_in_model")

_PROBE = """
import json, sys
heavy = ("tqdm", "torch._dynamo", "tensorboard", "accelerate")
import torch
before = {h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules)}
import stoker, stoker.utils
from stoker.utils import DistributedDataParallelKwargs, gather, set_seed, find_executable_batch_size
after = {h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules)}
print(json.dumps(sorted(after - before)))
"""


def test_every_name_is_importable_and_stoker_utils_stays_light() -> None:
    for name in NAMES:
        assert getattr(su, name) is not None, name
    assert set(NAMES) <= set(dir(su)) and set(NAMES) <= set(su.__all__)
    with pytest.raises(AttributeError, match="no attribute 'warp'"):
        su.warp  # noqa: B018
    out = run_python(["-c", _PROBE], env=base_env(), timeout=120)  # a process without stoker loaded
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_top_level_names_match_accelerates() -> None:
    import stoker

    for name in ("PartialState", "DistributedType", "FullyShardedDataParallelPlugin", "DistributedDataParallelKwargs",
                 "find_executable_batch_size", "skip_first_batches", "synchronize_rng_states"):
        assert getattr(stoker, name) is not None


def test_set_seed_has_accelerates_signature() -> None:
    su.set_seed(7, device_specific=True)  # process 0 of 1: seed + 0
    a = torch.rand(3)
    su.set_seed(7)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(TypeError, match="needs an int"):
        su.set_seed("7")


def test_collectives_in_one_process_are_identities_on_copies() -> None:
    t = torch.arange(3.0)
    assert torch.equal(su.gather(t), t) and su.gather(torch.tensor(5.0)).shape == (1,)
    assert su.gather_object(["a"]) == ["a"] and su.gather_object({"k": 1}) == {"k": 1}
    assert su.broadcast({"x": t})["x"] is t and su.broadcast_object_list([1, 2]) == [1, 2]
    reduced = su.reduce(t, "sum", scale=2.0)
    assert torch.equal(reduced, t * 2) and reduced is not t
    assert su.reduce(t) is not t and torch.equal(su.reduce(t), t)
    with pytest.raises(ValueError, match="not a reduction"):
        su.reduce(t, "median")
    assert torch.equal(su.pad_across_processes(t), t)
    su.synchronize_rng_states(["torch", "generator"], generator=torch.Generator())  # one process: nothing to do
    su.wait_for_everyone()
    moved = su.send_to_device({"x": t}, torch.device("cpu"))
    assert torch.equal(moved["x"], t)


@pytest.fixture
def cleared(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records the cache clearing (a full gc.collect costs ~0.3 s in a test process) instead of doing it."""
    import stoker.compat.accelerate.memory as memory

    calls: list[bool] = []
    monkeypatch.setattr(memory, "clear_device_cache", lambda garbage_collection=False: calls.append(garbage_collection))
    return calls


def test_find_executable_batch_size_halves_on_out_of_memory_and_remembers(cleared: list[bool]) -> None:
    tried = []

    @su.find_executable_batch_size(starting_batch_size=128)
    def train(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        if batch_size > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * scale

    assert train(2) == 32 and tried == [128, 64, 32, 16]
    assert cleared == [True] * 4  # before the first try and after each out-of-memory error
    assert train(3) == 48 and tried[-1] == 16  # the size that worked is kept
    with pytest.raises(TypeError, match="batch size as its first argument"):
        train(8, 2)


def test_find_executable_batch_size_other_errors_and_the_end(cleared: list[bool]) -> None:
    @su.find_executable_batch_size(starting_batch_size=4)
    def broken(batch_size: int) -> None:
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug"):
        broken()
    sizes = []

    def never_fits(batch_size: int) -> None:
        sizes.append(batch_size)
        raise torch.OutOfMemoryError("out of memory")

    with pytest.raises(RuntimeError, match="No executable batch size"):
        su.find_executable_batch_size(never_fits, starting_batch_size=5)()
    assert sizes == [5, 2, 1]
    custom = su.find_executable_batch_size(never_fits, starting_batch_size=9, reduce_batch_size_fn=lambda: 0)
    sizes.clear()
    with pytest.raises(RuntimeError):
        custom()
    assert sizes == [9]
    assert su.should_reduce_batch_size(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert not su.should_reduce_batch_size(RuntimeError("shape mismatch"))


def test_release_memory_and_extract_model() -> None:
    a, b = torch.ones(3), torch.ones(3)
    assert su.release_memory(a, b) == [None, None]
    model = make_mlp()
    assert su.extract_model_from_parallel(torch.nn.DataParallel(model)) is model
    from stoker import Accelerator

    prepared = Accelerator(cpu=True, mixed_precision="bf16").prepare(model)
    assert "forward" in vars(prepared)  # the autocast wrapper
    su.extract_model_from_parallel(prepared, keep_fp32_wrapper=False)
    assert "forward" not in vars(model)


def test_tqdm_shows_on_the_local_main_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    bar = su.tqdm(range(3))
    assert bar.disable is False and list(bar) == [0, 1, 2]
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert su.tqdm(range(3)).disable is True
    assert su.tqdm(range(3), main_process_only=False).disable is False


def test_logger_and_distributed_type_values() -> None:
    assert su.LoggerType.TENSORBOARD == "tensorboard" and str(su.LoggerType.WANDB) == "wandb"
    assert su.DistributedType.MULTI_GPU.value == "MULTI_GPU"


def test_module_level_save_writes_on_the_main_process_only(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    su.save({"a": torch.ones(2)}, tmp_path / "main.pt")
    assert (tmp_path / "main.pt").exists()
    monkeypatch.setenv("RANK", "1")
    su.save({"a": torch.ones(2)}, tmp_path / "other.pt")
    assert not (tmp_path / "other.pt").exists()
    su.save({"a": torch.ones(2)}, tmp_path / "node.pt", save_on_each_node=True)  # LOCAL_RANK 0: writes
    assert (tmp_path / "node.pt").exists()


def test_availability_checks_and_accelerates_module_paths() -> None:
    import stoker.local_sgd
    import stoker.logging

    assert su.is_torch_version(">=", "2.4") and not su.is_torch_version("<", "2.0")
    assert su.is_fp16_available() and su.is_bf16_available() and su.is_cuda_available() == torch.cuda.is_available()
    assert su.is_schedulefree_available() is False and su.is_npu_available() is False  # not installed here
    with pytest.raises(ValueError, match="expected one of"):
        su.is_torch_version("~=", "2.4")
    assert stoker.logging.get_logger is su.get_logger and stoker.local_sgd.LocalSGD is su.LocalSGD


def test_local_sgd_in_one_process_does_nothing_and_checks_its_steps() -> None:
    from stoker import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(make_mlp())
    with su.LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=2) as local_sgd:
        local_sgd.step()
    assert local_sgd.enabled is False and local_sgd.num_steps == 1
    with pytest.raises(ValueError, match="local_sgd_steps"):
        su.LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=0)


def test_get_logger_in_one_process(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    monkeypatch.setattr(logging.root, "level", logging.root.level)  # get_logger sets the root level too: restored
    logger = su.get_logger("stoker-test", log_level="INFO")
    assert logging.getLogger("stoker-test").level == logging.INFO
    with caplog.at_level("INFO", logger="stoker-test"):
        logger.info("shown")
        logger.info("also shown", main_process_only=False, in_order=True)
        logger.warning_once("once")
        logger.warning_once("once")
    assert [r.getMessage() for r in caplog.records] == ["shown", "also shown", "once"]
