"""`WandbLogger`: metrics, hyperparameters and the run itself on Weights & Biases (extra ``stoker[wandb]``).

This module owns one W&B run per logger. It imports ``wandb`` only when the run starts (the first write), because
importing it costs about a second; constructing the logger only checks that the package is installed. The run's
local files go into the logger's ``version_{n}`` folder, so a W&B run built next to TensorBoard or CSV loggers
shares their version folder.
"""

from __future__ import annotations

import argparse
import numbers
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stoker.loggers._packages import is_installed, missing_package_error
from stoker.loggers.base import (Logger, check_log_folder, flatten_params, main_process_experiment, params_to_dict,
                                 prefixed)
from stoker.loggers.model_uploads import ModelUploads, Upload, UploadsCheckpoints

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

__all__ = ["WandbLogger"]


class WandbLogger(UploadsCheckpoints, Logger):
    """Logs to a Weights & Biases run; Lightning's ``WandbLogger`` arguments.

    The run starts on the first write (or the first access to ``experiment``), with ``wandb.init(project=project,
    name=name, id=id or version, dir=log_dir, ...)``. Its local files are written under
    ``{save_dir}/{project}/version_{n}/wandb/`` (``version_{n}`` as for the other stoker loggers; a string
    ``version`` is also the run id, so passing an earlier run's id resumes it). Offline runs
    (``offline=True`` or ``WANDB_MODE=offline``) stay there until ``wandb sync``.

    ``log_metrics`` calls ``run.log(metrics, step=step)``: numbers and one-element tensors are converted once,
    other values (``wandb.Image``, ``wandb.Table``, ...) pass through. Hyperparameters go to ``run.config``
    (nested mappings flattened with ``"/"``). ``finalize`` finishes the run (exit code 0 on success, 1 otherwise);
    logging afterwards resumes the same run id. Several loggers in one process each own their run
    (``reinit="create_new"``), so two Accelerators do not share or finish each other's runs.

    Args:
        name: The run's display name (W&B picks one when None).
        save_dir: Root folder for the run's local files. ``dir`` is Lightning's alias for it.
        version: ``None`` (next free ``version_{n}``), an int, or a string: the folder name and the run id.
        offline: Run without network; files stay local until ``wandb sync``.
        dir: Alias of ``save_dir``.
        id: The run id (resumes that run when it exists). Same as a string ``version``.
        anonymous: Passed to W&B as ``anonymous="allow"``.
        project: The W&B project, also the sub-folder of ``save_dir``; ``"stoker_logs"`` when None.
        log_model: Upload checkpoints of ``ModelCheckpoint`` as W&B model artifacts: ``True`` the kept ones when the
            run ends (each as it is saved with ``save_top_k=-1``), ``"all"`` each as it is saved, ``False`` none.
            An artifact holds the checkpoint folder as ``model.ckpt/``, with aliases ``latest`` (and ``best``) and
            Lightning's metadata. Offline, W&B keeps a staged copy until ``wandb sync`` uploads it.
        experiment: An existing W&B run to log into instead of starting one; it is not finished by ``finalize``.
        prefix: Prepended to every metric name as ``"{prefix}-{name}"``.
        checkpoint_name: The artifact's name (``model-{run id}`` when None).
        **kwargs: Passed to ``wandb.init`` (``entity``, ``tags``, ``group``, ``notes``, ``settings``, ...).

    Raises:
        ModuleNotFoundError: ``wandb`` is not installed (install ``stoker[wandb]``).

    Example:
        >>> logger = WandbLogger(project="mnist", save_dir="runs", offline=True)  # doctest: +SKIP
        >>> logger.log_hyperparams({"lr": 1e-3})  # doctest: +SKIP
        >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
        >>> logger.finalize("success")  # doctest: +SKIP
    """

    writes_files = True

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike = ".",
        version: int | str | None = None,
        offline: bool = False,
        dir: str | os.PathLike | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: bool | str = False,
        experiment: Run | None = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not is_installed("wandb"):
            raise missing_package_error("WandbLogger", "wandb", "stoker[wandb]")
        self._uploads = ModelUploads(log_model, "WandbLogger")
        if id is not None and version is not None and str(version) != str(id):
            raise ValueError(f"WandbLogger(version={version!r}, id={id!r}) disagree; both name the run id. Pass one.")
        for key in ("project", "name", "id", "dir", "resume", "reinit"):
            if key in kwargs:
                raise TypeError(f"WandbLogger(**kwargs) got {key!r}, which the logger sets itself; pass it "
                                "as the logger's own argument (resume: pass id=... of the run).")
        super().__init__(dir if dir is not None else save_dir, project or "stoker_logs",
                         id if id is not None else version)
        check_log_folder(self)  # a file in the way fails now, not after an epoch of training
        self._display_name = name
        self._offline = offline
        self._anonymous = anonymous
        self._prefix = prefix
        self._checkpoint_name = checkpoint_name
        self._init_kwargs = kwargs
        self._run: Run | None = experiment
        self._owns_run = experiment is None
        self._last_run_id: str | None = None  # after a finish, a new start resumes this run

    def __getstate__(self) -> dict[str, Any]:
        # A live run holds a connection to the W&B service; a pickled copy (sent to spawned workers) starts its own.
        state = self.__dict__.copy()
        if self._owns_run:
            state["_run"] = None
        return state

    @property
    def project(self) -> str:
        """The W&B project (also the sub-folder of ``save_dir``)."""
        return self._name

    @property
    @main_process_experiment
    def experiment(self) -> Run:
        """The W&B run, started on first access (``logger.experiment.log({...})`` for what the logger does not wrap)."""
        if self._run is None:
            self._run = self._start()
        return self._run

    tracker = run = experiment  # Accelerate's names for the underlying object (WandBTracker.run)

    @property
    def run_id(self) -> str:
        """The W&B run id (starts the run)."""
        return self.experiment.id

    def _start(self) -> Run:
        import wandb  # lazy on purpose: see the module docstring

        # Absolute: W&B's service process, started by the first run, resolves a relative `dir` against its own
        # working directory, so a later run's console log would land there. W&B falls back to a temp dir when `dir`
        # does not exist.
        folder = os.path.abspath(self.log_dir)
        os.makedirs(folder, exist_ok=True)
        run_id = self._version if isinstance(self._version, str) else self._last_run_id
        options: dict[str, Any] = dict(
            project=self._name, name=self._display_name, dir=folder, reinit="create_new", **self._init_kwargs
        )
        if run_id is not None:
            options.update(id=run_id, resume="allow")
        if self._offline:
            options["mode"] = "offline"
        if self._anonymous:
            options["anonymous"] = "allow"
        run = wandb.init(**options)
        self._last_run_id = run.id
        return run

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """``run.log(metrics, step=step)``; one ``.item()`` per tensor, W&B media objects passed through."""
        self.log(metrics, step)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log``: :meth:`log_metrics`, with ``kwargs`` (``commit``, ...) given to
        ``run.log``."""
        converted: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            elif isinstance(value, torch.Tensor):
                raise ValueError(f"Metric {key!r} is a tensor of shape {tuple(value.shape)}; log a scalar (reduce it "
                                 "first) or wrap it in a W&B type such as wandb.Histogram.")
            elif isinstance(value, numbers.Number) and hasattr(value, "item"):
                value = value.item()  # NumPy scalars
            converted[prefixed(str(key), self._prefix)] = value
        if converted:
            self.experiment.log(converted, step=self._resolve_step(step), **kwargs)

    def log_images(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log_images``: each entry (a list of arrays or PIL images) as a list of
        ``wandb.Image``, in one ``run.log`` call."""
        import wandb

        self.log({key: [wandb.Image(image) for image in images] for key, images in values.items()}, step, **kwargs)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """Accelerate's ``tracker.log_table``: a ``wandb.Table`` from ``columns`` and ``data`` or a ``dataframe``."""
        import wandb

        self.log({table_name: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step, **kwargs)

    def log_text(self, key: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:
        """Lightning's ``log_text``: rows of text as a ``wandb.Table`` under ``key``."""
        self.log_table(key, columns, data, dataframe, step)

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Lightning's ``log_image``: ``images`` (arrays, tensors, PIL images or paths) as ``wandb.Image``s under
        ``key``; each keyword is a list with one value per image (``caption=[...]``)."""
        self._log_media("Image", key, images, step, kwargs)

    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Lightning's ``log_audio``: ``audios`` as ``wandb.Audio``s (per-item keywords such as
        ``sample_rate=[...]``)."""
        self._log_media("Audio", key, audios, step, kwargs)

    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Lightning's ``log_video``: ``videos`` as ``wandb.Video``s (per-item keywords such as ``fps=[...]``)."""
        self._log_media("Video", key, videos, step, kwargs)

    def _log_media(self, kind: str, key: str, items: Any, step: int | None, per_item: dict[str, list[Any]]) -> None:
        """One ``run.log`` of ``items`` wrapped in ``wandb.<kind>``, each with its share of ``per_item``."""
        if not isinstance(items, list):
            raise TypeError(f"WandbLogger.log_{kind.lower()}({key!r}, ...) takes a list of items, got "
                            f"{type(items).__name__}; wrap a single one in a list.")
        uneven = {name: len(values) for name, values in per_item.items() if len(values) != len(items)}
        if uneven:
            raise ValueError(f"WandbLogger.log_{kind.lower()}({key!r}, ...): {len(items)} items, but the keyword "
                             f"lists have lengths {uneven}; give one value per item.")
        import wandb

        wrap = getattr(wandb, kind)
        self.log({key: [wrap(item, **{name: values[i] for name, values in per_item.items()})
                        for i, item in enumerate(items)]}, step)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Merge ``params`` into ``run.config`` (nested mappings flattened with ``"/"``)."""
        self.experiment.config.update(flatten_params(params_to_dict(params)), allow_val_change=True)

    def watch(self, model: torch.nn.Module, log: str | None = "gradients", log_freq: int = 100,
              log_graph: bool = True) -> None:
        """``run.watch(model, ...)``: gradient/parameter histograms (Lightning's ``WandbLogger.watch``)."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    def _upload(self, uploads: list[Upload]) -> None:
        """The backend's transfer of ``log_model``'s checkpoints (see `UploadsCheckpoints`)."""
        if not uploads:
            return
        import wandb

        for upload in uploads:
            artifact = wandb.Artifact(name=self._checkpoint_name or f"model-{self.experiment.id}", type="model",
                                      metadata=upload.metadata())
            artifact.add_dir(upload.path, name="model.ckpt")  # Lightning's file name, here a folder
            self.experiment.log_artifact(artifact, aliases=upload.aliases)

    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        """``run.use_artifact(artifact, type=artifact_type)``: the artifact, recorded as this run's input
        (Lightning's method; e.g. ``logger.use_artifact("model-abc123:best").download()``)."""
        return self.experiment.use_artifact(artifact, type=artifact_type)

    @staticmethod
    def download_artifact(artifact: str, save_dir: str | os.PathLike | None = None,
                          artifact_type: str | None = None, use_artifact: bool | None = True) -> str:
        """Downloads ``artifact`` (``"entity/project/name:alias"``) into ``save_dir`` (W&B's default folder when
        None) and returns the folder: through the active run (``use_artifact``, recorded as its input) when there is
        one and ``use_artifact``, else through ``wandb.Api()``. A checkpoint that ``log_model`` uploaded comes back
        as ``{folder}/model.ckpt``, for ``ckpt_path=``. Lightning's static method; it needs the W&B server."""
        import wandb

        if wandb.run is not None and use_artifact:
            found = wandb.run.use_artifact(artifact)
        else:
            found = wandb.Api().artifact(artifact, type=artifact_type)
        return found.download(root=None if save_dir is None else os.fspath(save_dir))

    def finalize(self, status: str) -> None:
        """Upload the checkpoints ``log_model=True`` keeps for the end (on success, as Lightning), then finish the
        run: exit code 0 for ``"success"``, 1 otherwise. Safe to call repeatedly."""
        if status == "success":
            self._upload(self._uploads.at_end())
        run, self._run = self._run, None
        if run is None or not self._owns_run:
            self._run = run
            return
        run.finish(exit_code=0 if status == "success" else 1)
