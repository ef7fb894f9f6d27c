"""The Accelerate compatibility suite: Accelerate's own test scripts and examples, run with stoker in Accelerate's
place, in one and in two processes on CPU (select it with ``-m compat``).

* The functions of ``accelerate/test_utils/scripts/{test_sync,test_script,test_distributed_data_loop,test_ops}.py``
  (shipped in Accelerate's wheel) run unchanged; only the names they import from Accelerate point at stoker's
  (``swap.py``). A function that fails because of a deliberate difference (``cases.difference``; listed in the
  README) must fail with the error that difference predicts.
* Accelerate's examples run from adapted copies (``examples/``: Accelerate's training code with stoker's import
  and offline stand-ins for the downloaded data, model and metric), through their own ``main()``.

Each process count is one launch of ``run_cases.py`` (interpreter start-up dominates), started in the background
when the session starts (``tests/helpers/launches.py``); every case is one test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cases import CASES, Case, difference
from tests.compat.example_cases import EXAMPLES
from tests.helpers.dist_spawn import base_env, read_results, run_workers
from tests.helpers.launches import Launches, session_run
from tests.helpers.forkserver import run_python

pytestmark = [pytest.mark.compat, pytest.mark.timeout(450)]
WORKER = Path(__file__).resolve().parent / "run_cases.py"


def _launch(out: Path, processes: int) -> dict[str, Any]:
    """Runs every case in ``processes`` processes; returns ``{"results": {id: error}, "observed": [per rank]}``
    where an error from any process counts."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        pytest.fail("the compatibility suite runs Accelerate's test scripts: install the test extra, "
                    "pip install -e '.[test]' (accelerate is a test-only dependency)")
    if processes == 1:
        done = run_python([str(WORKER), str(out)], env=base_env(), timeout=400)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    else:
        ranks = run_workers(WORKER, [out], nprocs=processes, timeout=400, check=False)
        assert all(r.returncode == 0 for r in ranks), "\n".join(r.output[-2000:] for r in ranks)
    per_rank = read_results(out, processes)
    results = {case_id: "\n".join(f"rank {r}: {res['results'][case_id]}" for r, res in enumerate(per_rank)
                                  if res["results"].get(case_id)) or None
               for case_id in per_rank[0]["results"]}
    return {"results": results, "observed": [res["observed"] for res in per_rank]}


@session_run("compat_one_process", "test_script_in_one_process", "test_example_in_one_process")
def _one_process_run(out: Path) -> dict[str, Any]:
    return _launch(out, 1)


@session_run("compat_two_processes", "test_script_in_two_processes", "test_example_in_two_processes")
def _two_processes_run(out: Path) -> dict[str, Any]:
    return _launch(out, 2)


@pytest.fixture
def one_process(session_launches: Launches) -> dict[str, Any]:
    """The one-process run, started in the background with the session (``tests/helpers/launches.py``)."""
    return session_launches.result("compat_one_process")


@pytest.fixture
def two_processes(session_launches: Launches) -> dict[str, Any]:
    """The two-process run, started in the background with the session (``tests/helpers/launches.py``)."""
    return session_launches.result("compat_two_processes")


def _check(run: dict[str, Any], case: Case, processes: int) -> None:
    results = run["results"]
    assert case.id in results, f"{case.id} did not run in {processes} process(es)"
    error, expected = results[case.id], difference(case, processes)
    if expected is None:
        assert error is None, f"{case.id} failed in {processes} process(es):\n{error}"
    else:
        assert error is not None, f"{case.id} passed: remove its deliberate difference ({expected.reason})"
        assert re.search(expected.error, error), f"{case.id} failed otherwise than {expected.reason!r}:\n{error}"


@pytest.mark.parametrize("case", [c for c in CASES if 1 in c.processes], ids=lambda c: c.id)
def test_script_in_one_process(one_process: dict[str, Any], case: Case) -> None:
    _check(one_process, case, 1)


@pytest.mark.distributed
@pytest.mark.parametrize("case", [c for c in CASES if 2 in c.processes], ids=lambda c: c.id)
def test_script_in_two_processes(two_processes: dict[str, Any], case: Case) -> None:
    _check(two_processes, case, 2)


def _check_example(run: dict[str, Any], name: str, processes: int) -> None:
    error = run["results"].get(f"example::{name}", "did not run")
    assert error is None, f"example {name} failed in {processes} process(es):\n{error}"
    for rank, observed in enumerate(run["observed"]):
        seen = observed[f"example::{name}"]
        if name == "complete_nlp_example":
            # Saved at every step, resumed from step_3 with stateful loaders: the same final weights.
            assert seen["same_final_weights"] and len(seen["checkpoints"]) == 12 // processes
            seen = seen["first"]
        if name == "complete_nlp_example_tracking":  # every tracker's own reader finds the three epochs
            metrics = ["accuracy", "epoch", "f1", "train_loss"]
            assert seen["tensorboard"] == {m: [0, 1, 2] for m in metrics}, seen["tensorboard"]
            assert seen["csv"] == [[e, metrics] for e in range(3)], seen["csv"]  # (JSON made the pairs lists)
            assert seen["mlflow"] == {m: [0, 1, 2] for m in metrics} and seen["wandb_runs"] == 1, seen
        # 40 evaluation samples, counted once each in every epoch's metric (gather_for_metrics drops the repeats).
        assert seen["metric_counts"] == [40, 40, 40], (name, rank, seen)
        if name == "memory":  # batches of 16 ran "out of memory"; find_executable_batch_size went on with 8
            assert seen["batches"][0] == 16 and set(seen["batches"][1:]) == {8}
        if name == "profiler":
            assert seen["traces"] == [f"profile_{r}.json" for r in range(processes)]
    if name == "local_sgd":  # averaged at the end of each epoch: the same parameters on every process
        finals = [observed["example::local_sgd"]["final_parameters"] for observed in run["observed"]]
        assert all(f == finals[0] for f in finals)
    batches = [len(observed[f"example::{name}"].get("batches", [])) for observed in run["observed"]]
    assert len(set(batches)) == 1, f"the processes ran different numbers of batches: {batches}"


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_in_one_process(one_process: dict[str, Any], name: str) -> None:
    _check_example(one_process, name, 1)


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_in_two_processes(two_processes: dict[str, Any], name: str) -> None:
    _check_example(two_processes, name, 2)
