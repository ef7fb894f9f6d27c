"""Worker of tests/accelerator/test_data_distributed.py (two gloo processes): user batch samplers are sharded without
repeats, and stateful loaders save and restore in two processes the ways Accelerate's scripts do it.

    python tests/helpers/dist_data_worker.py OUT_DIR   # started by dist_spawn.run_workers; writes OUT_DIR/rank{r}.json
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler, TensorDataset

import dist_common as common  # noqa: F401 (makes the repo importable)
from stoker import Accelerator, DataLoaderConfiguration

OUT = Path(sys.argv[1])
RANK = common.rank()
N = 16


class ListIndexed(Dataset):
    """Indexed by a whole list of indices at once (what ``sampler=BatchSampler(...), batch_size=None`` asks for)."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: list[int]) -> torch.Tensor:
        return torch.tensor(idx)


class ShuffledPairs(Sampler[list[int]]):
    """A user's own batch sampler drawing from the global RNG (nothing stoker knows how to seed)."""

    def __iter__(self):  # noqa: ANN204
        order = torch.randperm(N).tolist()
        return iter([order[i:i + 2] for i in range(0, N, 2)])

    def __len__(self) -> int:
        return N // 2


def loaders(n: int = N) -> dict[str, DataLoader]:
    data = TensorDataset(torch.arange(n))
    return {
        "batch_sampler": DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 2, drop_last=False)),
        "sampler_is_batch_sampler": DataLoader(ListIndexed(), sampler=BatchSampler(RandomSampler(range(N)), 2, False),
                                               batch_size=None),
        "own_batch_sampler": DataLoader(data, batch_sampler=ShuffledPairs()),
    }


def flat(batch: object) -> list[int]:
    return (batch[0] if isinstance(batch, list) else batch).reshape(-1).tolist()


def check_sharding(result: dict) -> None:
    torch.manual_seed(RANK)  # the ranks' global RNGs differ, as without set_seed
    accelerator = Accelerator(cpu=True)
    for name, loader in loaders().items():
        prepared = accelerator.prepare(loader)
        result[f"shard_{name}"] = [[i for b in prepared for i in flat(b)] for _ in range(2)]  # two epochs
    # 18 samples in batches of 2 over 2 processes: the last batch is padded, gather_for_metrics drops the repeats
    data = TensorDataset(torch.arange(18))
    padded = accelerator.prepare(DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 2, False)))
    result["gathered_padded"] = [i for (b,) in padded for i in accelerator.gather_for_metrics(b).tolist()]
    whole = accelerator.prepare(DataLoader(ListIndexed(18), sampler=BatchSampler(RandomSampler(range(18)), 2, False),
                                           batch_size=None))  # the padding is a whole batch of the user's
    result["gathered_padded_sampler"] = [i for b in whole for i in accelerator.gather_for_metrics(b).tolist()]


class Stream(IterableDataset):
    def __init__(self, values: torch.Tensor) -> None:
        self.values = values

    def __iter__(self):  # noqa: ANN204
        return iter(self.values)


def accelerate_pattern(iterable: bool, workers: int) -> bool:
    """Accelerate's stateful-loader test: every rank saves into its *own* temporary folder after 3 batches, reads the
    rest, loads the state back and must see the same rest again."""
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    values = torch.arange(32 * accelerator.num_processes)
    dataset = Stream(values) if iterable else TensorDataset(values)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=4, shuffle=not iterable, num_workers=workers))
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the other ranks are told that the main process's folder is used
        rest = []
        for step, batch in enumerate(loader):
            if step == 2:
                accelerator.save_state(folder)
            if step > 2:
                rest.append(flat(batch))
        accelerator.load_state(folder)
        resumed = [flat(batch) for batch in loader]
        accelerator.wait_for_everyone()  # the main process's folder goes away when it leaves this block
    return len(rest) > 0 and resumed == rest


def example_pattern(tmp: Path) -> dict:
    """Accelerate's checkpointing example with use_stateful_dataloader=True: save_state every 3 steps into
    step_{n} while training, then resume from step_6 in a fresh Accelerator and compare the batches that follow."""

    def build() -> tuple:
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        train = DataLoader(TensorDataset(torch.arange(40.0).unsqueeze(1)), batch_size=4, shuffle=True)
        stream = DataLoader(Stream(torch.arange(40.0).unsqueeze(1)), batch_size=4)
        return (accelerator, *accelerator.prepare(model, opt, train, stream))

    accelerator, model, opt, train, stream = build()
    seen, step = [], 0
    for epoch in range(2):
        for (x,), s in zip(train, stream):
            accelerator.backward((model(x) - s).pow(2).mean())
            opt.step()
            opt.zero_grad()
            step += 1
            seen.append(flat(x) + flat(s))
            if step % 3 == 0:
                accelerator.save_state(str(tmp / f"step_{step}"))
    accelerator, model, opt, train, stream = build()
    accelerator.load_state(str(tmp / "step_6"))
    resumed = []
    while train.epoch < 2:
        resumed += [flat(x) + flat(s) for (x,), s in zip(train, stream)]
    return {"seen_after_6": seen[6:], "resumed": resumed}


def main() -> None:
    result: dict = {}
    check_sharding(result)
    common.write_result(OUT, result)  # after every check: a later crash leaves the earlier findings readable
    for iterable in (False, True):
        for workers in (0, 1):
            result[f"accelerate_pattern_iterable_{iterable}_workers_{workers}"] = accelerate_pattern(iterable, workers)
            common.write_result(OUT, result)
    shared = OUT / "shared"
    if RANK == 0:
        shared.mkdir(exist_ok=True)
    Accelerator(cpu=True).wait_for_everyone()
    result.update(example_pattern(shared))
    common.write_result(OUT, result)


if __name__ == "__main__":
    main()
