"""Accelerate's examples (adapted copies in ``examples/``) as cases: each runs its ``main()`` with command-line
flags, in the shared working directory, and returns what the test checks (``_fakes`` records it).

Each function takes the working directory and returns a JSON-able dict; an exception fails the case.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.compat.examples import _fakes


def _run(name: str, *flags: str) -> dict[str, Any]:
    """Runs ``examples/{name}.py``'s ``main()`` with ``flags``; returns the metric counts and model batch sizes."""
    module = importlib.import_module(f"tests.compat.examples.{name}")
    _fakes.METRIC_COUNTS.clear()
    _fakes.MODEL_BATCHES.clear()
    _fakes.MODELS.clear()
    saved = sys.argv
    sys.argv = [f"{name}.py", "--cpu", *flags]
    try:
        module.main()
    finally:
        sys.argv = saved
    return {"metric_counts": list(_fakes.METRIC_COUNTS), "batches": list(_fakes.MODEL_BATCHES)}


def nlp_example(cwd: Path) -> dict[str, Any]:
    return _run("nlp_example")


def gradient_accumulation(cwd: Path) -> dict[str, Any]:
    return _run("gradient_accumulation", "--gradient_accumulation_steps", "2")


def multi_process_metrics(cwd: Path) -> dict[str, Any]:
    return _run("multi_process_metrics")


def early_stopping(cwd: Path) -> dict[str, Any]:
    return _run("early_stopping")


def ddp_comm_hook(cwd: Path) -> dict[str, Any]:
    return _run("ddp_comm_hook", "--ddp_comm_hook", "fp16")


def memory(cwd: Path) -> dict[str, Any]:
    _fakes.OOM_ABOVE = 8  # batches of 16 "run out of memory": find_executable_batch_size retries with 8
    try:
        return _run("memory")
    finally:
        _fakes.OOM_ABOVE = None


def profiler(cwd: Path) -> dict[str, Any]:
    observed = _run("profiler", "--output_trace_dir", "traces")
    return {**observed, "traces": sorted(os.listdir(cwd / "traces"))}


def local_sgd(cwd: Path) -> dict[str, Any]:
    """Gradients are not synchronised inside LocalSGD; parameters are averaged every 2 steps and at the end."""
    observed = _run("local_sgd", "--local_sgd_steps", "2")
    model = _fakes.MODELS[-1]
    return {**observed, "final_parameters": [v for p in model.parameters() for v in p.detach().reshape(-1).tolist()]}


def complete_nlp_example(cwd: Path) -> dict[str, Any]:
    """A run saving every step, then a run resumed from its third checkpoint (stateful loaders): the last
    checkpoints of both hold the same weights."""
    from safetensors.torch import load_file

    flags = ("--checkpointing_steps", "1", "--use_stateful_dataloader")
    first = _run("complete_nlp_example", *flags, "--output_dir", "full")
    resumed = _run("complete_nlp_example", *flags, "--output_dir", "resumed", "--resume_from_checkpoint", "full/step_3")

    def last(folder: str) -> dict:
        steps = sorted((int(p.name.split("_")[1]), p) for p in (cwd / folder).glob("step_*"))
        return load_file(steps[-1][1] / "model.safetensors")

    a, b = last("full"), last("resumed")
    return {"first": first, "resumed": resumed, "same_final_weights": a.keys() == b.keys()
            and all(bool((a[k] == b[k]).all()) for k in a),
            "checkpoints": sorted(p.name for p in (cwd / "full").glob("step_*"))}


def complete_nlp_example_tracking(cwd: Path) -> dict[str, Any]:
    """``--with_tracking``: ``Accelerator(log_with="all", project_dir=...)`` with every tracker installed
    (TensorBoard, CSV, W&B offline, MLflow in a local store), ``init_trackers``, ``accelerator.log`` per epoch and
    ``end_training``. Returns what each tracker's own reader finds (TensorBoard's ``EventAccumulator``, the CSV file,
    ``MlflowClient``) once the run has ended on every process."""
    import csv
    import glob

    from tests.helpers.trackers_readback import tensorboard_scalars

    from unittest import mock

    with mock.patch.dict(os.environ, {"WANDB_MODE": "offline"}):  # no network: W&B writes its run folder only
        observed = _run("complete_nlp_example", "--with_tracking", "--project_dir", "tracked", "--output_dir",
                        "tracked_out")
    [log_dir] = glob.glob(str(cwd / "tracked" / "complete_nlp_example" / "version_*"))
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        csv_rows = [(int(row["step"]), sorted(k for k, v in row.items() if v and k != "step"))
                    for row in csv.DictReader(f)]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'tracked' / 'mlflow.db'}")
    [experiment] = [e for e in client.search_experiments() if e.name == "complete_nlp_example"]
    [run] = client.search_runs([experiment.experiment_id])
    return {**observed,
            "tensorboard": {tag: [step for step, _ in series] for tag, series in tensorboard_scalars(log_dir).items()},
            "csv": csv_rows,
            "mlflow": {key: [m.step for m in client.get_metric_history(run.info.run_id, key)]
                       for key in sorted(run.data.metrics)},
            "wandb_runs": len(glob.glob(os.path.join(log_dir, "wandb", "offline-run-*")))}


EXAMPLES: dict[str, Callable[[Path], dict[str, Any]]] = {
    f.__name__: f for f in (nlp_example, complete_nlp_example, complete_nlp_example_tracking, early_stopping, memory,
                            ddp_comm_hook, gradient_accumulation, multi_process_metrics, profiler, local_sgd)
}
