"""``notebook_launcher`` / ``debug_launcher`` refusals and the one-process path (no process is started), and where
Accelerate's launcher names live in stoker."""

from __future__ import annotations

import os

import pytest
import torch

import stoker
from stoker import notebook_launcher


def _fail(*args: object) -> None:
    raise AssertionError("the function must not run")


def test_refused_inside_an_already_distributed_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="already one rank of 2"):
        notebook_launcher(_fail, num_processes=2)
    with pytest.raises(RuntimeError, match="already one rank of 2"):
        stoker.debug_launcher(_fail)


def test_refused_to_fork_after_cuda_was_initialized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA was already initialized"):
        notebook_launcher(_fail, num_processes=2)


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="mixed_precision"):
        notebook_launcher(_fail, num_processes=2, mixed_precision="fp17")
    with pytest.raises(ValueError, match="node_rank"):
        notebook_launcher(_fail, num_processes=2, num_nodes=2, node_rank=2)
    with pytest.raises(ValueError, match="rdzv_backend"):
        notebook_launcher(_fail, num_processes=2, rdzv_backend="etcd")


def test_one_process_or_none_on_cpu_runs_the_function_here(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    notebook_launcher(lambda a, b: seen.append((a, b, os.getpid(), os.environ.get("WORLD_SIZE"))), (1, 2),
                      num_processes=1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    notebook_launcher(lambda: seen.append(os.getpid()))  # num_processes=None on a machine without GPUs
    assert seen == [(1, 2, os.getpid(), None), os.getpid()]


def test_accelerates_names_are_importable_where_accelerate_has_them() -> None:
    from stoker import debug_launcher, init_empty_weights, init_on_device  # noqa: F401
    from stoker.utils import patch_environment

    assert "notebook_launcher" in dir(stoker) and "init_empty_weights" in dir(stoker)
    with patch_environment(stoker_test_var=3):
        assert os.environ["STOKER_TEST_VAR"] == "3"
    assert "STOKER_TEST_VAR" not in os.environ


def test_prepare_for_launch_sets_the_workers_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    from stoker.utils import DistributedType, PrepareForLaunch

    for name in ("LOCAL_RANK", "RANK", "FORK_LAUNCHED"):  # PrepareForLaunch sets them: restored when the test ends
        monkeypatch.setenv(name, "")  # (delenv of an unset name records nothing to restore)
        monkeypatch.delenv(name)
    monkeypatch.setenv("NPROC", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    seen = []
    PrepareForLaunch(lambda a: seen.append((a, os.environ["LOCAL_RANK"], os.environ["RANK"])),
                     DistributedType.MULTI_CPU)(1, "x")
    assert seen == [("x", "1", "3")] and os.environ["FORK_LAUNCHED"] == "1"
    monkeypatch.delenv("RANK")
    PrepareForLaunch(lambda: seen.append(os.environ.get("RANK")))(0)  # "NO": no ranks set
    assert seen[-1] is None
