"""Accelerate's own ``test_utils/scripts/test_notebook.py``, its names swapped for stoker's (``swap.py``), run in
two processes from this one, as its ``main()`` runs under Accelerate's CI.

One case differs on purpose: Accelerate's elastic agent reports a failed worker as ``ChildFailedError``; stoker
raises the worker's own exception (chained to its traceback), so ``test_monitoring`` is checked here with the
same function and the same property (the sleeping worker is stopped at once), but stoker's exception type."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.compat import swap

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.compat, pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with swap.swapped(swap.load("test_notebook")) as module:
        monkeypatch.setattr(module, "NUM_PROCESSES", 2)
        yield module


@pytest.mark.parametrize("case", ["test_can_initialize", "test_clean_cuda_fork", "test_mixed_precision",
                                  "test_static_rdzv_backend", "test_c10d_rdzv_backend", "test_fault_tolerant"])
def test_accelerates_notebook_case(script: ModuleType, case: str) -> None:
    getattr(script, case)()


def test_accelerates_monitoring_case_raises_the_workers_error(script: ModuleType) -> None:
    started = time.time()
    with pytest.raises(RuntimeError, match="I'm an even process. I don't like to sleep."):
        script.notebook_launcher(script.bipolar_sleep_function, (100,), num_processes=2, monitor_interval=0.01)
    assert time.time() - started < 100
