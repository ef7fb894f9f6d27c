"""A restored loader position restores its shuffle too, whatever the resuming process's global RNG did."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from stoker import Accelerator, DataLoaderConfiguration, set_seed
from tests.helpers.data_seed_common import EPOCHS, batches, make_loader, rest_of_run
from tests.helpers.dist_spawn import REPO, base_env
from tests.helpers.forkserver import run_python


def test_load_state_in_a_new_process_with_another_global_seed_continues_the_same_shuffle(tmp_path: Path) -> None:
    set_seed(0)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    loaders = accelerator.prepare(*make_loader())
    uninterrupted = []
    for loader in loaders:
        first = []
        for (x,) in loader:
            first.append(x.tolist())
            if len(first) == 2:
                break  # two batches in: the position the checkpoint records
        uninterrupted.append(first)
    accelerator.save_state(str(tmp_path / "ckpt"))
    expected = rest_of_run(loaders, EPOCHS)
    assert all(len(epochs) == EPOCHS for epochs in expected)
    assert expected[0][1] != sorted(expected[0][1])  # shuffled: a wrong seed would show

    proc = run_python([str(REPO / "tests/helpers/data_seed_worker.py"), str(tmp_path / "ckpt")], env=base_env(),
                      cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resumed["different_seed"] == expected
    assert resumed["set_seed_after"] == expected


def test_load_state_dict_in_process_restores_the_shuffle_of_the_saved_seed() -> None:
    torch.manual_seed(5)
    original = Accelerator(cpu=True).prepare(make_loader()[0])
    state = dict(original.state_dict(), epoch=1)
    expected = batches(original) and batches(original)  # epoch 1 of the original
    other = Accelerator(cpu=True).prepare(make_loader()[0])  # another seed drawn at prepare
    assert other.seed != original.seed
    other.load_state_dict(state)
    assert batches(other) == expected
