"""Prepared loaders in two gloo processes: user batch samplers give each sample to exactly one process, and stateful
loaders save and restore the ways Accelerate's scripts do it (``tests/helpers/dist_data_worker.py``, one launch)."""

from __future__ import annotations

import pytest

from tests.helpers.dist_spawn import read_results, run_workers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    out = tmp_path_factory.mktemp("data")
    results = run_workers("dist_data_worker.py", [out], nprocs=2, timeout=200, check=False)
    # A rank that crashes leaves what it found before the crash; the tests needing the rest fail with its output.
    report = "\n".join(f"--- rank {r.rank} (exit {r.returncode}) ---\n{r.output[-3000:]}" for r in results)
    return [read_results(out)[r] if (out / f"rank{r}.json").exists() else {} for r in range(2)], report


def _finding(launch: tuple[list[dict], str], key: str) -> list:
    values = [r.get(key) for r in launch[0]]
    assert all(v is not None for v in values), f"a rank stopped before recording {key}:\n{launch[1]}"
    return values


@pytest.mark.parametrize("name", ["batch_sampler", "sampler_is_batch_sampler", "own_batch_sampler"])
def test_a_user_batch_sampler_gives_each_sample_to_exactly_one_process(launch: tuple[list[dict], str],
                                                                       name: str) -> None:
    shards = _finding(launch, f"shard_{name}")
    for epoch in range(2):
        first, second = (shard[epoch] for shard in shards)
        assert len(first) == len(second) == 8
        assert sorted(first + second) == list(range(16)), (epoch, first, second)
    assert shards[0][0] != shards[0][1]  # each epoch reshuffles


def test_gather_for_metrics_over_a_padded_user_batch_sampler_is_the_dataset(launch: tuple[list[dict], str]) -> None:
    for gathered in _finding(launch, "gathered_padded") + _finding(launch, "gathered_padded_sampler"):
        assert sorted(gathered) == list(range(18))


@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize("workers", [0, 1])
def test_stateful_save_state_into_each_ranks_own_folder_resumes(launch: tuple[list[dict], str], iterable: bool,
                                                                workers: int) -> None:
    # Each rank passes its own temporary folder (Accelerate's own test does): the main process's folder is used.
    assert all(_finding(launch, f"accelerate_pattern_iterable_{iterable}_workers_{workers}"))


def test_stateful_save_state_every_few_steps_while_training_then_resume(launch: tuple[list[dict], str]) -> None:
    for seen, resumed in zip(_finding(launch, "seen_after_6"), _finding(launch, "resumed")):
        assert len(seen) > 0 and resumed == seen
