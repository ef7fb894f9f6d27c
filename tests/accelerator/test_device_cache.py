"""``clear_device_cache(garbage_collection=True)`` collects garbage only where a device cache will take back what
the collection frees: on a CPU-only machine it skips the full ``gc.collect()`` (a tenth of a second and more in a
large process, once per Trainer stage change and per batch-size trial)."""

from __future__ import annotations

import gc

import pytest
import torch

from stoker.accelerator import operations


def _record(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(operations.gc, "collect", lambda *a, **k: calls.append("collect") or 0)
    return calls


def test_without_a_device_cache_nothing_is_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record(monkeypatch)
    monkeypatch.setattr(operations, "_device_caches", lambda: [])
    operations.clear_device_cache(garbage_collection=True)
    assert calls == []


def test_with_a_device_cache_the_collection_comes_first_then_the_cache_is_emptied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record(monkeypatch)
    monkeypatch.setattr(operations, "_device_caches", lambda: [lambda: calls.append("empty_cache")])
    operations.clear_device_cache(garbage_collection=True)
    assert calls == ["collect", "empty_cache"]
    calls.clear()
    operations.clear_device_cache()  # garbage_collection=False: only the cache
    assert calls == ["empty_cache"]


def test_the_caches_are_those_of_the_available_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch.cuda.empty_cache in operations._device_caches()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch.cuda.empty_cache not in operations._device_caches()


def test_free_memory_still_drops_every_prepared_object_on_a_cpu() -> None:
    from stoker import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    assert accelerator.holds_prepared
    assert accelerator.free_memory(model) == [None]
    assert not accelerator.holds_prepared
    assert gc.isenabled()  # the interpreter's own collector is left as it was
