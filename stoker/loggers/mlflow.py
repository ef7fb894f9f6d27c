"""`MLFlowLogger`: metrics and hyperparameters in an MLflow tracking store (extra ``stoker[mlflow]``).

This module owns one MLflow run per logger, driven through an ``MlflowClient`` of its own: never MLflow's fluent API
(``mlflow.start_run``), whose active run is process-global state that two loggers would share. ``mlflow`` is
imported only when the logger first talks to the store (importing it costs seconds); constructing the logger only
checks that the package is installed.

Where runs go: ``tracking_uri`` when given, else ``MLFLOW_TRACKING_URI``, else an SQLite store
``{save_dir}/mlflow.db`` with artifacts under ``{save_dir}/artifacts`` (MLflow's own default backend is SQLite;
its file store now refuses to open unless ``MLFLOW_ALLOW_FILE_STORE=true``).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers._packages import is_installed, missing_package_error
from stoker.loggers.base import Logger, flatten_params, main_process_experiment, params_to_dict, prefixed, to_scalars
from stoker.loggers.model_uploads import ModelUploads, Upload, UploadsCheckpoints

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["MLFlowLogger"]

VERSION_TAG = "stoker.version"  # the shared version number of the run, as a tag (MLflow has no version folders)
_BAD_KEY_CHARS = re.compile(r"[^\w\-. :/]")  # what MLflow accepts in metric and param names
_MAX_METRICS, _MAX_PARAMS, _MAX_PARAM_LEN = 1000, 100, 6000  # MLflow's per-request limits
_STATUS = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


class MLFlowLogger(UploadsCheckpoints, Logger):
    """Logs to an MLflow run; Lightning's ``MLFlowLogger`` arguments.

    The experiment is found (or created) and the run started on the first write or the first access to
    ``run_id``. A new run is named ``run_name``, else ``version_{n}``, and tagged ``stoker.version=n``: the version
    is the next number free in the experiment, or, for loggers built together (``log_with=["tensorboard",
    "mlflow"]``), the number their ``version_{n}`` folder uses. ``run_id`` logs into an existing run instead.

    Metrics go to ``log_batch`` with their step (names with characters MLflow rejects get ``_`` in their place);
    hyperparameters are flattened with ``"/"`` and stored as strings (MLflow params cannot change once logged:
    logging a different value for the same name raises MLflow's error). ``finalize`` ends the run as FINISHED,
    FAILED or KILLED; logging afterwards reopens it.

    Args:
        experiment_name: The MLflow experiment.
        run_name: The run's name; ``version_{n}`` when None.
        tracking_uri: The store (``"sqlite:///path/mlflow.db"``, ``"http://host:5000"``, ``"file:./mlruns"``).
        tags: Tags for a new run.
        save_dir: Folder of the default SQLite store (used when no ``tracking_uri`` and no ``MLFLOW_TRACKING_URI``).
        log_model: Copy checkpoints of ``ModelCheckpoint`` into the run's artifacts: ``True`` the kept ones when the
            run ends (each as it is saved with ``save_top_k=-1``), ``"all"`` each as it is saved, ``False`` none.
            A checkpoint ``{name}.ckpt`` goes to ``{name}/{name}.ckpt/`` with ``{name}/metadata.yaml`` and
            ``{name}/aliases.txt`` beside it (Lightning's layout).
        prefix: Prepended to every metric name as ``"{prefix}-{name}"``.
        artifact_location: Artifact root for a new experiment.
        run_id: Log into this existing run.
        synchronous: Passed to ``MlflowClient.log_batch`` (None: MLflow's default).
        version: ``None`` (next free number), an int, or a string used as the version as-is.

    Raises:
        ModuleNotFoundError: ``mlflow`` is not installed (install ``stoker[mlflow]``).

    Example:
        >>> logger = MLFlowLogger("mnist", tracking_uri="sqlite:///runs/mlflow.db")  # doctest: +SKIP
        >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
        >>> logger.finalize("success")  # doctest: +SKIP
        >>> logger.experiment.get_metric_history(logger.run_id, "train/loss")[0].value  # doctest: +SKIP
        0.25
    """

    keeps_numbers_only = True  # Accelerate's tracker.log leaves text and media out (Logger.log)

    writes_files = True

    def __init__(
        self,
        experiment_name: str = "stoker_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | os.PathLike | None = "./mlruns",
        log_model: bool | str = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
        version: int | str | None = None,
    ) -> None:
        if not is_installed("mlflow"):
            raise missing_package_error("MLFlowLogger", "mlflow", "stoker[mlflow]")
        self._uploads = ModelUploads(log_model, "MLFlowLogger")
        super().__init__(save_dir if save_dir is not None else "./mlruns", experiment_name, version)
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self._default_store = not tracking_uri
        if self._default_store:
            tracking_uri = "sqlite:///" + Path(self._save_dir).resolve().joinpath("mlflow.db").as_posix()
            if artifact_location is None:
                artifact_location = Path(self._save_dir).resolve().joinpath("artifacts").as_uri()
        self._tracking_uri: str = tracking_uri
        self._run_name = run_name
        self._tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._synchronous = synchronous
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._finished = False  # finalize() ended the run; the next write reopens it

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # a client holds a database engine; a pickled copy makes its own
        return state

    @property
    def tracking_uri(self) -> str:
        """The tracking store this logger writes to."""
        return self._tracking_uri

    @property
    def save_dir(self) -> str | None:
        """The folder of the default local store; None with a ``tracking_uri`` (or ``MLFLOW_TRACKING_URI``), where
        ``save_dir`` has no effect, as in Lightning: the run's checkpoints and files then go under the Trainer's
        ``default_root_dir`` (``{default_root_dir}/{experiment_name}/version_{n}/checkpoints``)."""
        return self._save_dir if self._default_store else None

    @property
    def log_dir(self) -> str | None:
        """``save_dir``: the folder of the default local store (MLflow keeps runs in its store, not in folders)."""
        return self.save_dir

    @property
    @main_process_experiment
    def experiment(self) -> MlflowClient:
        """The logger's ``MlflowClient`` (for what the logger does not wrap: ``log_artifact``, ``set_tag``...)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient  # lazy on purpose: see the module docstring

            if self._default_store:
                os.makedirs(self._save_dir, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self._tracking_uri)
        return self._client

    tracker = experiment  # Accelerate's name for the underlying object

    @property
    def experiment_id(self) -> str:
        """The experiment's id, creating the experiment when it does not exist."""
        if self._experiment_id is None:
            client = self.experiment
            found = client.get_experiment_by_name(self._name)
            self._experiment_id = (found.experiment_id if found is not None
                                   else client.create_experiment(self._name, artifact_location=self._artifact_location))
        return self._experiment_id

    @property
    def run_id(self) -> str:
        """The MLflow run id; starts the run on first access."""
        if self._run_id is None:
            version = self.version
            tags = {VERSION_TAG: str(version), **self._tags}
            run = self.experiment.create_run(self.experiment_id, tags=tags, run_name=self.run_name)
            self._run_id = run.info.run_id
        return self._run_id

    @property
    def run_name(self) -> str:
        """The MLflow run's name: ``run_name`` when given, else ``version_{n}`` (Accelerate's MLflow tracker's
        ``run_name`` too)."""
        version = self.version
        return self._run_name or (version if isinstance(version, str) else f"version_{version}")

    def _open_run_id(self) -> str:
        """The run id for a write: reopens the run when ``finalize`` ended it."""
        run_id = self.run_id
        if self._finished:
            self.experiment.update_run(run_id, status="RUNNING")
            self._finished = False
        return run_id

    def next_free_version(self) -> int:
        """One past the largest ``stoker.version`` tag among the experiment's runs (0 for a new experiment)."""
        client = self.experiment
        found = client.get_experiment_by_name(self._name)
        if found is None:
            return 0
        from mlflow.entities import ViewType

        largest, token = -1, None
        while True:
            page = client.search_runs([found.experiment_id], run_view_type=ViewType.ALL, max_results=1000,
                                      page_token=token)
            for run in page:
                tag = run.data.tags.get(VERSION_TAG, "")
                if tag.isdigit():
                    largest = max(largest, int(tag))
            token = page.token
            if not token:
                return largest + 1

    def log_metrics(self, metrics: Mapping[str, float | int | torch.Tensor], step: int | None = None) -> None:
        """Log scalar metrics at ``step`` in one ``log_batch`` call (one ``.item()`` per tensor)."""
        from mlflow.entities import Metric

        values = to_scalars(metrics)
        if not values:
            return
        step = self._resolve_step(step)
        stamp = int(time.time() * 1000)
        entries = [Metric(self._key(key), float(value), stamp, step) for key, value in values.items()]
        run_id = self._open_run_id()
        for start in range(0, len(entries), _MAX_METRICS):
            self._log_batch(run_id, metrics=entries[start:start + _MAX_METRICS])

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Log ``params`` as MLflow params (flattened with ``"/"``; values as strings of at most 6000 characters)."""
        from mlflow.entities import Param

        flat = flatten_params(params_to_dict(params))
        entries = [Param(_BAD_KEY_CHARS.sub("_", k), str(v)[:_MAX_PARAM_LEN]) for k, v in flat.items()]
        run_id = self._open_run_id()
        for start in range(0, len(entries), _MAX_PARAMS):
            self._log_batch(run_id, params=entries[start:start + _MAX_PARAMS])

    # Accelerate's MLflowTracker methods for files, through this logger's client and run (not MLflow's active run).
    def log_artifact(self, local_path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Copies the file ``local_path`` into the run's artifacts (under ``artifact_path``)."""
        self.experiment.log_artifact(self._open_run_id(), os.fspath(local_path), artifact_path)

    def log_artifacts(self, local_dir: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Copies every file under ``local_dir`` into the run's artifacts (under ``artifact_path``)."""
        self.experiment.log_artifacts(self._open_run_id(), os.fspath(local_dir), artifact_path)

    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """Saves a matplotlib or plotly ``figure`` as the artifact ``artifact_file`` (``"plots/loss.png"``)."""
        self.experiment.log_figure(self._open_run_id(), figure, artifact_file, save_kwargs=save_kwargs or None)

    def _upload(self, uploads: list[Upload]) -> None:
        """The backend's transfer of ``log_model``'s checkpoints (see `UploadsCheckpoints`)."""
        if not uploads:
            return
        import yaml

        for upload in uploads:
            name = os.path.basename(upload.path)
            folder = Path(name).stem
            self.log_artifacts(upload.path, f"{folder}/{name}")
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "metadata.yaml"), "w") as file:
                    yaml.safe_dump(upload.metadata("Checkpoint"), file, default_flow_style=False)
                with open(os.path.join(tmp, "aliases.txt"), "w") as file:
                    file.write(str(upload.aliases))
                self.log_artifacts(tmp, folder)

    def finalize(self, status: str) -> None:
        """Upload the checkpoints ``log_model=True`` keeps for the end, then end the run (FINISHED for
        ``"success"``, FAILED, or KILLED for ``"interrupted"``); safe to repeat."""
        self._upload(self._uploads.at_end())
        if self._run_id is None or self._finished:
            return
        self.experiment.set_terminated(self._run_id, status=_STATUS.get(status, "FINISHED"))
        self._finished = True

    def _key(self, key: str) -> str:
        return _BAD_KEY_CHARS.sub("_", prefixed(key, self._prefix))

    def _log_batch(self, run_id: str, **entries: Any) -> None:
        if self._synchronous is None:
            self.experiment.log_batch(run_id, **entries)
        else:
            self.experiment.log_batch(run_id, synchronous=self._synchronous, **entries)
