"""Two processes, loaders whose last step is short, as Accelerate 1.16 gives them (measured by a differential
probe): ``split_batches`` completes a short last batch from the epoch's start; with ``dispatch_batches=True`` an
iterable dataset's last step is shared in equal parts, as Accelerate's batch dispatcher shares it;
``skip_first_batches`` of such a loader skips; ``drop_last`` drops a stream's short last round, as a map-style
loader's; ``gather_for_metrics`` of a list of tensors cuts each tensor to the dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist_spawn import read_results, run_workers


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("accelerate_data_probe")
    run_workers(Path(__file__).parent / "accelerate_data_probe_worker.py", [str(out)], nprocs=2, timeout=150)
    return read_results(out)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_split_batches_complete_the_last_batch_from_the_epoch_start(ranks: list[dict]) -> None:
    assert [r["split_10"] for r in ranks] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    assert [r["split_11"] for r in ranks] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 0]]]


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_an_iterable_datasets_last_step_is_shared_as_accelerate_dispatches_it(ranks: list[dict]) -> None:
    assert [r["stream_True"] for r in ranks] == [[[0, 1, 2], [6, 7]], [[3, 4, 5], [8, 9]]]
    assert [r["stream_True_skip1"] for r in ranks] == [[[6, 7]], [[8, 9]]]
    # otherwise whole batches, the last completed with the stream's first items (Accelerate's IterableDatasetShard)
    for dispatch in ("None", "False"):
        assert [r[f"stream_{dispatch}"] for r in ranks] == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 0, 1]]]
        assert [r[f"stream_{dispatch}_skip1"] for r in ranks] == [[[6, 7, 8]], [[9, 0, 1]]]
    for r in ranks:
        for dispatch in ("None", "True", "False"):
            assert r[f"stream_{dispatch}_gathered"] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]], dispatch


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_drop_last_on_a_stream_drops_the_short_last_round(ranks: list[dict]) -> None:
    # as a map-style loader with drop_last (and as Accelerate and Lightning): [9] is dropped, and [6, 7, 8] too, which
    # cannot give both processes a full batch; nothing is repeated
    for key in ("stream_drop_last", "map_drop_last"):
        assert [r[key] for r in ranks] == [[[0, 1, 2]], [[3, 4, 5]]]
    for r in ranks:
        assert r["stream_drop_last_gathered"] == [[0, 1, 2, 3, 4, 5]]


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_gather_for_metrics_cuts_every_tensor_of_a_list(ranks: list[dict]) -> None:
    for r in ranks:
        ids = [i for batch in r["tuple_gathered"] for i in batch[0]]
        labels = [i for batch in r["tuple_gathered"] for i in batch[1]]
        assert ids == list(range(10)) and labels == [i * 10 for i in range(10)]
