"""When a prepared loader's epoch ends: a ``for`` loop, ``next()`` called ``len(loader)`` times, ``break``.

The rule: an epoch ends once its last batch has been handed out (however the iterator was driven); leaving before
that keeps the position, so the next iteration continues the same epoch.
"""

from __future__ import annotations

import gc

import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, set_seed


def _loader(accelerator: Accelerator, n: int = 6, batch_size: int = 2) -> DataLoader:
    return accelerator.prepare(DataLoader(TensorDataset(torch.arange(n)), batch_size=batch_size, shuffle=True))


def _for_loop_epochs(epochs: int, n: int = 6, batch_size: int = 2) -> list[list[list[int]]]:
    set_seed(0)
    loader = _loader(Accelerator(cpu=True), n, batch_size)
    return [[b[0].tolist() for b in loader] for _ in range(epochs)]


def test_next_len_times_then_a_new_iter_is_the_next_epoch() -> None:
    # The repro: the second iter() used to yield nothing (StopIteration) and shift every later epoch.
    expected = _for_loop_epochs(3)
    set_seed(0)
    loader = _loader(Accelerator(cpu=True))
    seen = []
    for _ in range(3):
        it = iter(loader)
        seen.append([next(it)[0].tolist() for _ in range(len(loader))])
    assert seen == expected
    assert expected[0] != expected[1]  # a new shuffle each epoch: the test can tell epochs apart
    assert loader.epoch == 2  # the last iterator is still open: its epoch ends when it is dropped or a new one starts
    del it
    gc.collect()
    assert loader.epoch == 3 and loader.batches_yielded == 0


def test_an_old_iterator_kept_alive_does_not_disturb_the_next_epoch() -> None:
    expected = _for_loop_epochs(3)
    set_seed(0)
    loader = _loader(Accelerator(cpu=True))
    kept = []
    for _ in range(2):
        it = iter(loader)
        kept.append(it)  # never dropped: its clean-up runs only at the end of the test
        assert [next(it)[0].tolist() for _ in range(len(loader))] == expected[len(kept) - 1]
    assert [b[0].tolist() for b in loader] == expected[2]
    kept.clear()
    gc.collect()
    assert loader.epoch == 3 and loader.batches_yielded == 0


def test_break_after_the_last_batch_ends_the_epoch_but_a_real_break_keeps_the_position() -> None:
    expected = _for_loop_epochs(3)
    set_seed(0)
    loader = _loader(Accelerator(cpu=True))
    for i, (x,) in enumerate(loader):
        if i == len(loader) - 1:
            break  # the last batch was handed out: the epoch is over
    assert (loader.epoch, loader.batches_yielded) == (1, 0)
    seen = []
    for (x,) in loader:
        seen.append(x.tolist())
        if len(seen) == 1:
            break  # a genuine early break: epoch 1 continues with its second batch
    assert (loader.epoch, loader.batches_yielded) == (1, 1)
    seen += [x.tolist() for (x,) in loader]
    assert seen == expected[1]
    it = iter(loader)
    first = next(it)[0].tolist()
    del it  # dropped before the last batch: position kept, like a break
    gc.collect()
    assert [first] + [b[0].tolist() for b in loader] == expected[2]


def test_set_epoch_after_a_next_driven_epoch_starts_the_chosen_epoch_from_its_start() -> None:
    # The DistributedSampler habit: set_epoch(e) at the top of each epoch, while the previous iterator is still open.
    expected = _for_loop_epochs(2)
    set_seed(0)
    loader = _loader(Accelerator(cpu=True))
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        it = iter(loader)
        seen.append([next(it)[0].tolist() for _ in range(len(loader))])
    assert seen == expected


def test_token_level_accumulation_recipe_with_next_over_three_epochs() -> None:
    # Accelerate's recipe for summed token losses: prefetch a window with next(), count its items, then backward
    # every micro-batch (here through backward(loss_sum, num_items=...)). Five batches per epoch and windows of 2:
    # the last window of each epoch is short. Must match a raw loop over the batches a for loop would give.
    steps, epochs, n, batch_size = 2, 3, 20, 4
    expected = _for_loop_epochs(epochs, n, batch_size)
    data = torch.randn(n, 3)
    target = torch.randn(n, 1)

    def batches_to_xy(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return data[idx], target[idx]

    set_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=steps)
    loader = _loader(accelerator, n, batch_size)
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 1)
    reference = torch.nn.Linear(3, 1)
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)

    updates = -(-len(loader) // steps)
    remainder = len(loader) % steps or steps
    seen = []
    for epoch in range(epochs):
        iterator = iter(loader)
        for update in range(updates):
            window = [next(iterator) for _ in range(steps if update < updates - 1 else remainder)]
            seen += [b[0].tolist() for b in window]
            items = sum(len(b[0]) for b in window)
            for (idx,) in window:
                x, y = batches_to_xy(idx.tolist())
                accelerator.backward(((model(x) - y) ** 2).sum(), num_items=len(idx))
            opt.step()
            opt.zero_grad()
            # the raw loop: the same sums, divided once by the window's item count
            for (idx,) in window:
                x, y = batches_to_xy(idx.tolist())
                ((reference(x) - y) ** 2).sum().backward()
            for p in reference.parameters():
                p.grad.mul_(1 / torch.tensor(float(items)))
            ref_opt.step()
            ref_opt.zero_grad()
    assert seen == [b for epoch in expected for b in epoch]
    for p, r in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, r, rtol=0, atol=0)
