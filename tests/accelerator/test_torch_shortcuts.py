"""The prepared loader's and optimizer's calls without torch's profiler ranges (stoker/accelerator/torch_shortcuts.py):
the same batches, weights, hooks and scheduler bookkeeping as the public calls, and the public calls (with their
ranges) whenever a profiler runs or anything else could differ."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator
from stoker.accelerator.step import torch_shortcuts
from stoker.accelerator.step.torch_shortcuts import next_batch_function, optimizer_step, zero_grad


def _model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _batches(fetch):
    out = []
    while True:
        try:
            out.append(fetch())
        except StopIteration:
            return out


@pytest.fixture
def ranges(monkeypatch) -> list[str]:
    """The names of the profiler ranges opened (``record_function``), profiler or not."""
    opened: list[str] = []
    enter = torch.autograd.profiler.record_function.__enter__

    def counting(self):
        opened.append(self.name)
        return enter(self)

    monkeypatch.setattr(torch.autograd.profiler.record_function, "__enter__", counting)
    return opened


def _profiled_names(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {event.name for event in prof.events()}


# -- the loader ---------------------------------------------------------------------------------------------------
def test_loader_shortcut_gives_the_same_batches_and_counts_them(ranges):
    data = TensorDataset(torch.arange(20.0).reshape(10, 2))
    loader = DataLoader(data, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(1))
    expected = [b[0] for b in DataLoader(data, batch_size=3, shuffle=True,
                                         generator=torch.Generator().manual_seed(1))]
    ranges.clear()  # the expected batches came through next()
    it, fetch = next_batch_function(loader)
    assert fetch is not it.__next__  # the shortcut is taken
    got = [b[0] for b in _batches(fetch)]
    assert len(got) == len(expected) == 4
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert it._num_yielded == 4
    assert ranges == []  # next() would have opened one per batch
    next(iter(loader))
    assert len(ranges) == 1 and ranges[0].startswith("enumerate(DataLoader)")  # (the fixture does count)


def test_loader_shortcut_leaves_iterable_datasets_and_workers_to_next():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    it, fetch = next_batch_function(DataLoader(Stream(), batch_size=2))
    assert fetch == it.__next__
    assert [b.tolist() for b in _batches(fetch)] == [[0, 1], [2]]


def test_loader_keeps_its_profiler_range_while_profiling():
    data = TensorDataset(torch.zeros(4, 2))
    _, fetch = next_batch_function(DataLoader(data, batch_size=2))
    names = _profiled_names(fetch)
    assert any(name.startswith("enumerate(DataLoader)") for name in names), sorted(names)[:20]


def test_prepared_loader_iterates_through_the_shortcut(monkeypatch):
    calls = []
    original = torch_shortcuts.next_batch_function

    def spy(loader):
        it, fetch = original(loader)
        calls.append(fetch is not it.__next__)
        return it, fetch

    monkeypatch.setattr("stoker.accelerator.data.loader.next_batch_function", spy)
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(6.0)), batch_size=2))
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert calls == [True]


# -- the optimizer step ---------------------------------------------------------------------------------------------
def _train(step, clear, steps: int = 12) -> list[torch.Tensor]:
    model, optimizer = _model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + s))
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(2))
    for _ in range(steps):
        model(x).pow(2).mean().backward()
        step(optimizer)
        scheduler.step()
        clear(optimizer)
    return [p.detach().clone() for p in model.parameters()]


def test_shortcut_step_and_zero_grad_match_the_public_calls_exactly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. the scheduler's "lr_scheduler.step() before optimizer.step()"
        fast = _train(optimizer_step, zero_grad)
    plain = _train(lambda o: o.step(), lambda o: o.zero_grad(set_to_none=True))
    for a, b in zip(fast, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_step_without_a_scheduler_calls_the_class_step_directly(ranges):
    model, optimizer = _model_and_optimizer()
    model(torch.ones(2, 4)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer_step(optimizer)
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert optimizer.state  # the optimizer's state was created by its own step
    zero_grad(optimizer)
    assert all(p.grad is None for p in model.parameters())
    assert ranges == []
    optimizer.zero_grad()
    assert len(ranges) == 1 and ranges[0].startswith("Optimizer.zero_grad#")  # (the fixture does count)


@pytest.mark.parametrize("where", ["optimizer", "global"])
def test_step_hooks_run_once_per_step(where):
    model, optimizer = _model_and_optimizer()
    seen = []
    if where == "optimizer":
        pre = optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append("pre"))
        post = optimizer.register_step_post_hook(lambda opt, args, kwargs: seen.append("post"))
    else:
        pre = register_optimizer_step_pre_hook(lambda opt, a, k: seen.append("pre"))
        post = register_optimizer_step_post_hook(lambda opt, a, k: seen.append("post"))
    try:
        model(torch.ones(2, 4)).sum().backward()
        optimizer_step(optimizer)
    finally:
        pre.remove()
        post.remove()
    assert seen == ["pre", "post"]


def test_a_step_patched_on_the_instance_is_called():
    model, optimizer = _model_and_optimizer()
    calls = []
    plain = optimizer.step

    def patched(*args, **kwargs):
        calls.append(1)
        return plain(*args, **kwargs)

    optimizer.step = patched
    model(torch.ones(2, 4)).sum().backward()
    optimizer_step(optimizer)
    assert calls == [1]


def test_an_optimizer_with_its_own_zero_grad_gets_the_call():
    class Keeping(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            self.cleared = set_to_none

    model = torch.nn.Linear(2, 1)
    optimizer = Keeping(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    zero_grad(optimizer)
    assert optimizer.cleared is True
    assert model.weight.grad is not None  # its zero_grad kept them: the shortcut did not run


def test_step_and_zero_grad_keep_their_profiler_ranges_while_profiling():
    model, optimizer = _model_and_optimizer()
    model(torch.ones(2, 4)).sum().backward()

    def both():
        optimizer_step(optimizer)
        zero_grad(optimizer)

    names = _profiled_names(both)
    assert any(name.startswith("Optimizer.step#") for name in names)
    assert any(name.startswith("Optimizer.zero_grad#") for name in names)
    assert all(p.grad is None for p in model.parameters())


def test_prepared_optimizer_uses_the_shortcuts_and_keeps_exact_parity():
    """The Accelerator loop against the hand-written one, with a scheduler: same weights, no warning."""
    accelerator = Accelerator(cpu=True)
    model, optimizer = _model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + s))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(12):
            accelerator.backward(model(x).pow(2).mean())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    plain = _train(lambda o: o.step(), lambda o: o.zero_grad(set_to_none=True))
    for a, b in zip(model.parameters(), plain):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0)


# -- the torch internals the shortcuts rely on: each test fails when torch changes one ------------------------------
def test_the_internals_are_detected_on_this_torch():
    assert torch_shortcuts.ENABLED and torch_shortcuts.detect() is not None
    assert torch_shortcuts.optimizer_internals_ok()


def test_single_process_loader_iterator_internals():
    from torch.utils.data.dataloader import _DatasetKind, _SingleProcessDataLoaderIter

    it = iter(DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2))
    assert type(it) is _SingleProcessDataLoaderIter and it._dataset_kind == _DatasetKind.Map
    assert it._num_yielded == 0
    first = it._next_data()  # what next() returns, without counting it
    assert torch.equal(first[0], torch.tensor([0.0, 1.0])) and it._num_yielded == 0


def test_the_profiler_probe_tells_whether_a_profiler_records():
    probe = torch._C._autograd._profiler_enabled
    assert probe() is False
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert probe() is True


def test_optimizer_step_is_a_hooked_wrapper_around_the_class_step():
    model, optimizer = _model_and_optimizer()
    step = type(optimizer).step
    assert step.hooked is True and callable(step.__wrapped__)
    assert isinstance(optimizer._optimizer_step_pre_hooks, dict) and not optimizer._optimizer_step_pre_hooks
    handle = optimizer.register_step_post_hook(lambda *args: None)
    assert len(optimizer._optimizer_step_post_hooks) == 1
    handle.remove()


def test_global_optimizer_hooks_live_in_two_module_dicts():
    from torch.optim import optimizer as torch_optim

    assert not torch_optim._global_optimizer_pre_hooks and not torch_optim._global_optimizer_post_hooks
    pre, post = register_optimizer_step_pre_hook(lambda *a: None), register_optimizer_step_post_hook(lambda *a: None)
    try:
        assert len(torch_optim._global_optimizer_pre_hooks) == len(torch_optim._global_optimizer_post_hooks) == 1
        # the shortcuts hold these very dicts (found once at import)
        assert torch_shortcuts._INTERNALS.global_pre_hooks is torch_optim._global_optimizer_pre_hooks
    finally:
        pre.remove()
        post.remove()


def test_an_lr_scheduler_marks_the_step_and_records_the_call():
    model, optimizer = _model_and_optimizer()
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    marker = optimizer.__dict__["step"]
    assert marker._wrapped_by_lr_sched is True and marker.__wrapped__ is type(optimizer).step
    optimizer.step()
    assert optimizer._opt_called is True


def test_with_the_shortcuts_off_training_is_the_same(monkeypatch, ranges):
    """Detection failed (a torch that changed its internals): the public calls run, with exact parity."""
    monkeypatch.setattr(torch_shortcuts, "ENABLED", False)
    loader = DataLoader(TensorDataset(torch.arange(6.0)), batch_size=2)
    it, fetch = next_batch_function(loader)
    assert fetch == it.__next__  # the public call
    test_prepared_optimizer_uses_the_shortcuts_and_keeps_exact_parity()
    assert any(name.startswith("Optimizer.step#") for name in ranges)  # the public step, with its range
    assert any(name.startswith("Optimizer.zero_grad#") for name in ranges)
