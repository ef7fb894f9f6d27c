"""The engine: :class:`Accelerator`, its configuration objects, and everything the layers above use of it.

The Trainer, callbacks and loggers import engine names from here only (``tests/test_layers.py`` checks it), so the
modules behind these names can move without touching them.
"""

from .accelerator import Accelerator, wait_for_checkpoints
from .arguments import InvalidArgumentError, check_accumulation_steps, check_seed
from .checkpointing.atomic import CheckpointError, remove_checkpoint, verify_checkpoint
from .checkpointing.folder_lock import FolderInUseError, check_folder_free
from .checkpointing.state_file import STATE_NAME, checkpoint_step, checkpoint_written, checkpoints_in, read_state
from .checkpointing.rng import capture_rng_state, kept_rng_state, restore_rng_state
from .checkpointing.torch_file import is_torch_file, read_torch_file
from .checkpointing.tree import load_tree
from .checkpointing.weights import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME, load_checkpoint_in_model
from .checkpointing.weights import MismatchedKeysError, key_mismatch, strip_compile_prefix
from .checkpointing.weights_read import checkpoint_weight_names, read_state_dict
from .config import DataLoaderConfiguration, ProjectConfiguration
from .data.position import ProcessCountError
from .data.prepare import prepare_data_loader
from .distributed.agreement import SignalAgreement, agree_on_max, average_gradients  # noqa: F401 - Trainer's agreement
from .distributed.collectives import gather_stacked
from .distributed.fsdp import FSDPStrategy
from .distributed.launch import describe_failures, ensure_processes, resolve_num_processes, run_outcome
from .distributed.spawn import Ranks, WorkerError, check_can_start, free_port, run_in_processes
from .distributed.strategy import DDPStrategy, SingleDevice
from .empty_init import init_empty_weights, init_on_device
from .operations import send_to_device, set_seed
from .step.optimizer import AcceleratedOptimizer, AcceleratedScheduler
from .step.precision import parse_precision

__all__ = [
    "Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler", "DataLoaderConfiguration", "DDPStrategy",
    "FSDPStrategy", "SingleDevice",
    "ProjectConfiguration", "load_checkpoint_in_model", "parse_precision", "send_to_device", "set_seed",
    "ProcessCountError", "init_empty_weights", "init_on_device",
    # What the Trainer, callbacks and loggers use of the engine (they import nothing else from it):
    # checkpoint folders (find, verify, read, remove; the rest are Accelerator methods: copy_checkpoint, ...) ...
    "CheckpointError", "FolderInUseError", "STATE_NAME", "check_folder_free", "checkpoint_step",
    "checkpoint_written", "checkpoints_in",
    "load_tree", "read_state", "remove_checkpoint", "verify_checkpoint", "wait_for_checkpoints",
    # ... single-file torch.save checkpoints (a Lightning .ckpt) ...
    "is_torch_file", "read_torch_file",
    # ... exported weights' file names and contents, random-number states, and launching processes.
    "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME", "WEIGHTS_NAME", "MismatchedKeysError", "key_mismatch",
    "read_state_dict", "checkpoint_weight_names", "strip_compile_prefix", "capture_rng_state", "describe_failures",
    "ensure_processes", "kept_rng_state", "resolve_num_processes", "restore_rng_state", "run_outcome",
    "Ranks", "WorkerError", "check_can_start", "free_port", "run_in_processes",
    # ... and the checks of arguments that also enter above the engine (one exception type and message each).
    "InvalidArgumentError", "check_accumulation_steps", "check_seed",
    # ... and a loader prepared outside the Accelerator's checkpointed list (the Trainer's val and test loaders).
    "prepare_data_loader",
    # ... and every process's tensors stacked (the module's all_gather).
    "gather_stacked",
]
