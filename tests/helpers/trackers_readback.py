"""Reading back what the TensorBoard, W&B and MLflow loggers wrote, with those projects' own tools.

``ListLogger`` keeps what a logger is given, in memory. TensorBoard: its ``EventAccumulator`` over a log folder. W&B: an offline run's ``.wandb`` transaction log, printed as
JSON records by ``wandb leet inspect --json`` (the reader W&B ships). MLflow: ``MlflowClient`` on the same tracking
URI. Each tool is imported where it is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker import Logger


class ListLogger(Logger):
    """A Logger that keeps every ``log_metrics`` call as ``(step, metrics)`` in ``rows``; it writes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int | None, dict[str, Any]]] = []

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))


def tensorboard_events(log_dir: str | os.PathLike) -> Any:
    """TensorBoard's ``EventAccumulator`` over the event files in ``log_dir``, loaded."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return events


def tensorboard_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag in ``log_dir``, as ``(step, value)`` pairs in the order written."""
    events = tensorboard_events(log_dir)
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@dataclass
class WandbRun:
    """One offline W&B run folder, as its records say."""

    path: Path
    run_id: str = ""
    project: str = ""
    display_name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (step, user values)
    exit_code: int | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # logged artifacts: name, type, aliases, metadata,
    # files ({path in the artifact: (size, base64 md5, the staged copy W&B uploads at sync)})


def wandb_runs(root: str | os.PathLike) -> list[WandbRun]:
    """Every offline run under ``root`` (searched recursively), oldest first."""
    dirs = sorted(Path(root).rglob("offline-run-*"), key=lambda p: p.name)
    return [read_wandb_run(d) for d in dirs if d.is_dir()]


def read_wandb_run(run_dir: str | os.PathLike) -> WandbRun:
    """Parses ``wandb leet inspect --json run_dir``."""
    exe = Path(sys.executable).with_name("wandb")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "wandb"]
    out = subprocess.run([*cmd, "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True,
                         timeout=120, check=True)
    run = WandbRun(Path(run_dir))
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        kind = record.get("type")
        body = record.get(kind, {})
        if kind == "run":
            run.run_id, run.project, run.display_name = body["run_id"], body["project"], body.get("display_name", "")
            run.config.update(_config_values(body.get("config", {})))
        elif kind == "config":
            run.config.update(_config_values(body))
        elif kind == "history":
            values = {k: v for k, v in body["item"].items() if not k.startswith("_")}
            run.history.append((int(body.get("step", {}).get("num", 0)), values))
        elif kind == "exit":
            run.exit_code = int(body.get("exit_code", 0))
        elif kind == "artifact":
            files = {c["path"]: (int(c.get("size", 0)), c.get("digest", ""), c.get("local_path", ""))
                     for c in body.get("manifest", {}).get("contents", [])}  # W&B's own (media tables) too
            run.artifacts.append({"name": body["name"], "type": body["type"], "aliases": sorted(body.get("aliases", [])),
                                  "metadata": json.loads(body.get("metadata") or "{}"), "files": files})
    return run


def _config_values(config: dict[str, Any]) -> dict[str, Any]:
    update = config.get("update", config)
    return {k: v for k, v in update.items() if k != "_wandb"}


def mlflow_client(tracking_uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def mlflow_runs(tracking_uri: str, experiment: str) -> list[Any]:
    """The experiment's runs (``mlflow.entities.Run``), oldest first."""
    client = mlflow_client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r} in {tracking_uri}"
    return sorted(client.search_runs([found.experiment_id]), key=lambda r: r.info.start_time)


def mlflow_history(tracking_uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of one metric, in step order."""
    history = mlflow_client(tracking_uri).get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)
