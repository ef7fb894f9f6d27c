"""``SaveConfigCallback``: the CLI's whole configuration written as ``config.yaml`` into the run's log folder
(``trainer.log_dir``) when the first stage starts, by the main process only, so that the run can be repeated with
``--config <log_dir>/config.yaml``.

Owns the file and the refusal to overwrite one a previous run wrote. It uses the Trainer's public surface only:
``log_dir``, ``is_global_zero`` and ``strategy.broadcast`` (every process agrees to refuse, not only the main one).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..callbacks import Callback
from .parser import KEEP_NONE

if TYPE_CHECKING:
    from ..compat.lightning.trainer import Trainer
    from ..trainer import TrainingModule

__all__ = ["SaveConfigCallback"]


class SaveConfigCallback(Callback):
    """Saves the CLI's configuration to ``<trainer.log_dir>/<config_filename>`` at ``setup`` of the first stage.

    Args:
        parser: The parser that parsed the configuration (it writes the file, as YAML).
        config: The parsed configuration.
        config_filename: The file's name in the log folder.
        overwrite: Replace a file a previous run left (default: refuse, with a ``RuntimeError``).
        multifile: Keep the structure of several input config files.
        save_to_log_dir: False: write nothing to the log folder (only for subclasses that override
            :meth:`save_config` to put the configuration elsewhere, e.g. a logger).

    Example:
        >>> LightningCLI(Net, save_config_kwargs={"overwrite": True})  # doctest: +SKIP
    """

    def __init__(self, parser: Any, config: Any, config_filename: str = "config.yaml", overwrite: bool = False,
                 multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError("`save_to_log_dir=False` only makes sense when subclassing SaveConfigCallback to "
                             "implement `save_config` (where the configuration goes instead); with neither, nothing "
                             "would be saved. Set save_config_callback=None in LightningCLI to save nothing.")

    def setup(self, trainer: Trainer, module: TrainingModule, stage: str) -> None:
        """Writes the file (main process) once per run; every process checks the refusal together."""
        if self.already_saved:
            return
        if self.save_to_log_dir:
            self._write(trainer)
        if trainer.is_global_zero:
            self.save_config(trainer, module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)  # all processes skip later stages

    def _write(self, trainer: Trainer) -> None:
        log_dir = trainer.log_dir
        path = os.path.join(log_dir, self.config_filename)
        if not self.overwrite:
            exists = trainer.strategy.broadcast(os.path.isfile(path) if trainer.is_global_zero else False)
            if exists:
                raise RuntimeError(
                    f"{type(self).__name__} expected {path} to NOT exist. Aborting to avoid overwriting results of a "
                    "previous run. You can delete the previous config file, set "
                    "`LightningCLI(save_config_callback=None)` to disable config saving, or set "
                    '`LightningCLI(save_config_kwargs={"overwrite": True})` to overwrite the config file.')
        if trainer.is_global_zero:  # the log folder may not exist yet: no logger has written anything
            os.makedirs(log_dir, exist_ok=True)
            self.parser.save(self.config, path, **KEEP_NONE, overwrite=self.overwrite, multifile=self.multifile)

    def save_config(self, trainer: Trainer, module: TrainingModule, stage: str) -> None:
        """Override to save the configuration somewhere else too (runs on the main process only: no collectives).

        Example:
            >>> def save_config(self, trainer, module, stage):  # doctest: +SKIP
            ...     trainer.logger.log_hyperparams({"config": self.parser.dump(self.config, skip_none=False)})
        """
