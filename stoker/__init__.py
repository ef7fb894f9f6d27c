"""stoker: a Lightning-style Trainer on an Accelerate-compatible engine, built on plain PyTorch.

The Trainer layer (Trainer, TrainingModule, callbacks, loggers) is imported on first use so that
``import stoker`` stays light.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .accelerator import (
    AcceleratedOptimizer,
    AcceleratedScheduler,
    DataLoaderConfiguration,
    DDPStrategy,
    FSDPStrategy,
    ProjectConfiguration,
    load_checkpoint_in_model,
    send_to_device,
    set_seed,
)
from .compat.accelerate import Accelerator  # the core Accelerator plus Accelerate's arguments and methods

from .version import __version__  # noqa: E402 - one place for the version
from .user_frame import silence_possible_user_warnings

silence_possible_user_warnings()  # POSSIBLE_USER_WARNINGS=off, as in Lightning

_LAZY = {
    "Trainer": "stoker.compat.lightning",  # the core stoker.trainer.Trainer plus Lightning's names
    "TrainingModule": "stoker.trainer",
    "DataModule": "stoker.trainer.datamodule",
    # Lightning's names for the same classes: `import pytorch_lightning as pl` -> `import stoker as pl` is the port
    "LightningModule": "stoker.trainer",
    "LightningDataModule": "stoker.trainer.datamodule",
    "seed_everything": "stoker.compat.lightning.seed",
    "Callback": "stoker.callbacks",
    "ModelCheckpoint": "stoker.callbacks",
    "EarlyStopping": "stoker.callbacks",
    "LearningRateMonitor": "stoker.callbacks",
    "ProgressBar": "stoker.callbacks",
    "TQDMProgressBar": "stoker.callbacks",
    "RichProgressBar": "stoker.callbacks",
    "RichModelSummary": "stoker.callbacks",
    "Timer": "stoker.callbacks",
    "ModelSummary": "stoker.callbacks",
    "BasePredictionWriter": "stoker.callbacks",
    "GradientAccumulationScheduler": "stoker.callbacks",
    "ThroughputMonitor": "stoker.callbacks",
    "OnExceptionCheckpoint": "stoker.callbacks",
    "StochasticWeightAveraging": "stoker.callbacks",
    "LambdaCallback": "stoker.callbacks",
    "BaseFinetuning": "stoker.callbacks",
    "BackboneFinetuning": "stoker.callbacks",
    "Logger": "stoker.loggers",
    "TensorBoardLogger": "stoker.loggers",
    "CSVLogger": "stoker.loggers",
    "WandbLogger": "stoker.loggers",
    "MLFlowLogger": "stoker.loggers",
    "read_checkpoint": "stoker.trainer.checkpoint_dict",  # what torch.load(path) gives for a Lightning .ckpt
    # Accelerate's top-level names (the rest of accelerate.utils is in stoker.utils)
    "PartialState": "stoker.compat.accelerate.state",
    "AcceleratorState": "stoker.compat.accelerate.state",
    "GradientState": "stoker.compat.accelerate.state",
    "DistributedType": "stoker.compat.accelerate.state",
    "skip_first_batches": "stoker.accelerator.data.prepare",
    "notebook_launcher": "stoker.compat.accelerate.launchers",
    "debug_launcher": "stoker.compat.accelerate.launchers",
    "init_empty_weights": "stoker.compat.accelerate.big_modeling",
    "init_on_device": "stoker.compat.accelerate.big_modeling",
    **{name: "stoker.utils" for name in (
        "AutocastKwargs", "DDPCommunicationHookType", "DeepSpeedPlugin", "DistributedDataParallelKwargs",
        "FullyShardedDataParallelPlugin", "GradScalerKwargs", "InitProcessGroupKwargs", "ProfileKwargs",
        "GradientAccumulationPlugin", "find_executable_batch_size", "synchronize_rng_states")},
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler", "DataLoaderConfiguration", "DDPStrategy",
    "FSDPStrategy",
    "ProjectConfiguration", "load_checkpoint_in_model", "send_to_device", "set_seed", *_LAZY,
]


if TYPE_CHECKING:  # type checkers and the docs' API reference cannot see PEP 562 lazy names: `X as X` re-exports
    from stoker.callbacks import (
        BackboneFinetuning as BackboneFinetuning, BaseFinetuning as BaseFinetuning,
        BasePredictionWriter as BasePredictionWriter, Callback as Callback, EarlyStopping as EarlyStopping,
        GradientAccumulationScheduler as GradientAccumulationScheduler, LambdaCallback as LambdaCallback,
        LearningRateMonitor as LearningRateMonitor,
        ModelCheckpoint as ModelCheckpoint, ModelSummary as ModelSummary,
        OnExceptionCheckpoint as OnExceptionCheckpoint, ProgressBar as ProgressBar,
        StochasticWeightAveraging as StochasticWeightAveraging, ThroughputMonitor as ThroughputMonitor, Timer as Timer,
        TQDMProgressBar as TQDMProgressBar, RichProgressBar as RichProgressBar, RichModelSummary as RichModelSummary,
    )
    from stoker.loggers import (
        CSVLogger as CSVLogger, Logger as Logger, MLFlowLogger as MLFlowLogger, TensorBoardLogger as TensorBoardLogger,
        WandbLogger as WandbLogger,
    )
    from stoker.accelerator.data.prepare import skip_first_batches as skip_first_batches
    from stoker.compat.accelerate.state import (
        AcceleratorState as AcceleratorState, DistributedType as DistributedType, GradientState as GradientState,
        PartialState as PartialState,
    )
    from stoker.compat.accelerate.big_modeling import (
        init_empty_weights as init_empty_weights, init_on_device as init_on_device,
    )
    from stoker.compat.accelerate.launchers import (
        debug_launcher as debug_launcher, notebook_launcher as notebook_launcher,
    )
    from stoker.compat.lightning import Trainer as Trainer
    from stoker.compat.lightning.seed import seed_everything as seed_everything
    from stoker.trainer import LightningModule as LightningModule, TrainingModule as TrainingModule
    from stoker.trainer.checkpoint_dict import read_checkpoint as read_checkpoint
    from stoker.trainer.datamodule import DataModule as DataModule, LightningDataModule as LightningDataModule
