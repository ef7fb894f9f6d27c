"""Accelerate's state objects, as views of one Accelerator (or of one process) rather than process-wide singletons.

* :class:`PartialState` describes this process (device, ranks, distributed type) and holds the process-control
  tools: ``wait_for_everyone``, ``split_between_processes``, ``main_process_first``, the ``on_*_process``
  decorators and the trigger flag. ``PartialState()`` on its own joins the launcher's process group, as
  Accelerate's does, so inference scripts that only use it keep working.
* :class:`AcceleratorState` adds what an Accelerator was configured with (mixed precision, plugins).
  ``accelerator.state`` is one, made for that Accelerator only: two Accelerators in one process have two states.
* :class:`GradientState` reads the accumulation window and the loader being iterated from its Accelerator, live.

A state's public attributes are plain values (they do not change once the process group is joined), so a state
compares and pickles by value; the strategy it talks to sits outside ``__dict__``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from ...accelerator.step.precision import Precision, parse_precision

if TYPE_CHECKING:
    from ...accelerator import Accelerator


class DistributedType(str, enum.Enum):
    """The kind of distributed run (Accelerate's names and values).

    stoker runs ``NO`` (one process), ``MULTI_CPU``/``MULTI_GPU``/``MULTI_XPU``/... (DDP, by device type) and
    ``FSDP``. The other members exist so that comparisons in ported scripts keep working. For scripts written
    against stoker before this enum existed, a member also equals the strategy class name it stands for
    (``"SingleDevice"``, ``"DDPStrategy"``, ``"FSDPStrategy"``).

    Example:
        >>> if accelerator.distributed_type == DistributedType.MULTI_GPU: ...
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"

    def __eq__(self, other: object) -> bool:
        if type(other) is str and other in _LEGACY_NAMES:  # the pre-enum value: the strategy's class name
            return self.value in _LEGACY_NAMES[other]
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


_MULTI = ("MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU",
          "MULTI_NEURON")
_LEGACY_NAMES = {"SingleDevice": ("NO",), "DDPStrategy": _MULTI, "FSDPStrategy": ("FSDP",)}


def distributed_type_of(strategy: Any) -> DistributedType:
    """``FSDP`` for a sharding strategy, ``MULTI_<DEVICE>`` for DDP, ``NO`` for one device."""
    if getattr(strategy, "shards_parameters", False):
        return DistributedType.FSDP
    if not getattr(strategy, "is_distributed", False):
        return DistributedType.NO
    name = f"MULTI_{'GPU' if strategy.device.type == 'cuda' else strategy.device.type.upper()}"
    return DistributedType(name) if name in _MULTI else DistributedType.MULTI_CPU


class _PerAccelerator:
    """Accelerate's singletons' reset hooks. stoker keeps no process-wide state (each Accelerator has its own), so
    there is nothing to reset and a view is always initialized."""

    __slots__ = ()

    @staticmethod
    def _reset_state(*args: Any, **kwargs: Any) -> None:
        """Nothing to reset."""

    @property
    def initialized(self) -> bool:
        return True


class PartialState(_PerAccelerator):
    """This process: its device and ranks, and tools to coordinate processes (see the module docstring).

    Args:
        cpu: Use the CPU even when an accelerator is present (when this state joins the process group itself).
        strategy: The strategy to describe; by default one is made as ``Accelerator(strategy="auto")`` would.
        **kwargs: ``backend`` and ``timeout`` (a ``timedelta``) for the process group it joins, as in Accelerate.

    Example:
        >>> state = PartialState()
        >>> with state.split_between_processes(["a cat", "a dog", "a bird"]) as prompts:
        ...     outputs = [generate(p) for p in prompts]
    """

    __slots__ = ("__dict__", "_strategy", "_trigger")

    def __init__(self, cpu: bool = False, *, strategy: Any = None, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - {"backend", "timeout"})
        if unknown:
            raise TypeError(f"{type(self).__name__}() got {unknown}; it takes cpu, and backend/timeout for the process "
                            "group it joins.")
        if strategy is None:
            from ...accelerator.distributed.strategy import make_strategy

            strategy = make_strategy("auto", cpu=cpu, group_options=kwargs)
        self._strategy = strategy
        self._trigger = False
        self.device: torch.device = strategy.device
        self.process_index: int = strategy.process_index
        self.local_process_index: int = strategy.local_process_index
        self.num_processes: int = strategy.num_processes
        self.distributed_type: DistributedType = distributed_type_of(strategy)
        self.backend: str | None = _backend(strategy)
        self.debug = False
        self.fork_launched = False

    # -- facts ------------------------------------------------------------------------------------------------
    @property
    def use_distributed(self) -> bool:
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def default_device(self) -> torch.device:
        return self.device

    def __repr__(self) -> str:
        backend = f"  Backend: {self.backend}" if self.backend else ""
        return (f"Distributed environment: {self.distributed_type.value}{backend}\nNum processes: {self.num_processes}"
                f"\nProcess index: {self.process_index}\nLocal process index: {self.local_process_index}\n"
                f"Device: {self.device}\n")

    # -- coordination -----------------------------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Blocks until every process reaches this call."""
        self._strategy.barrier()

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> contextlib.AbstractContextManager:
        """This process's contiguous share of a list, tuple, tensor or dict of them (see ``collectives.py``)."""
        from ...accelerator.distributed.collectives import split_between_processes

        return split_between_processes(self._strategy, inputs, apply_padding)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first, then the others."""
        with self._first(self.is_main_process):
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """The main process of each machine runs the block first, then the others on that machine."""
        with self._first(self.is_local_main_process):
            yield

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroys ``group`` (default: the default group, after releasing the DDP wrappers made on it)."""
        import torch.distributed as dist

        if group is None:
            self._strategy.teardown()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

    # -- decorators ---------------------------------------------------------------------------------------------
    def _runs_where(self, function: Callable | None, name: str, here: Callable[[], bool]) -> Callable:
        if function is None or not callable(function):
            raise TypeError(f"{name} decorates a function: use @accelerator.{name} above a def, or "
                            f"accelerator.{name}(function)(*args); got {function!r}.")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # In one process every decorator runs the function (Accelerate's rule), whatever index it names.
            if here() or not self.use_distributed:
                return function(*args, **kwargs)
            return None

        return wrapper

    def on_main_process(self, function: Callable | None = None) -> Callable:
        """Decorator: runs the function on the main process only (returns None elsewhere)."""
        return self._runs_where(function, "on_main_process", lambda: self.is_main_process)

    def on_local_main_process(self, function: Callable | None = None) -> Callable:
        """Decorator: runs the function on the main process of each machine only."""
        return self._runs_where(function, "on_local_main_process", lambda: self.is_local_main_process)

    def on_last_process(self, function: Callable | None = None) -> Callable:
        """Decorator: runs the function on the last process only."""
        return self._runs_where(function, "on_last_process", lambda: self.is_last_process)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Callable:
        """Decorator: runs the function on process ``process_index`` only.

        Example:
            >>> @accelerator.on_process(process_index=1)
            ... def report(): print("process 1")
        """
        if function is None and process_index is not None:
            return functools.partial(self.on_process, process_index=process_index)
        _check_index(process_index, self.num_processes, "on_process(process_index=...)")
        return self._runs_where(function, "on_process", lambda: self.process_index == process_index)

    def on_local_process(self, function: Callable | None = None, local_process_index: int | None = None) -> Callable:
        """Decorator: runs the function on local process ``local_process_index`` of each machine only."""
        if function is None and local_process_index is not None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        _check_index(local_process_index, self.num_processes, "on_local_process(local_process_index=...)")
        return self._runs_where(function, "on_local_process",
                                lambda: self.local_process_index == local_process_index)

    # -- triggers -----------------------------------------------------------------------------------------------
    def set_trigger(self) -> None:
        """Raises this process's flag; the next :meth:`check_trigger` on every process sees it."""
        self._trigger = True

    def check_trigger(self) -> bool:
        """True on every process when any process called :meth:`set_trigger` since the last check (which it
        resets). Collective: every process must call it at the same point."""
        raised = self._strategy.any_process(self._trigger)
        if raised:
            self._trigger = False
        return raised


def _check_index(index: Any, count: int, what: str) -> None:
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{what} needs a process index, an int >= 0; got {index!r}. There are {count} processes.")


def _backend(strategy: Any) -> str | None:
    import torch.distributed as dist

    if getattr(strategy, "is_distributed", False) and dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())
    return None


class AcceleratorState(PartialState):
    """What one Accelerator runs with: this process (see :class:`PartialState`) plus its mixed precision and
    plugins. ``accelerator.state`` is this Accelerator's; constructed on its own it describes this process with
    ``mixed_precision`` (default ``"no"``).

    Example:
        >>> accelerator.state.mixed_precision, accelerator.state.distributed_type
        ('bf16', <DistributedType.MULTI_GPU: 'MULTI_GPU'>)
    """

    __slots__ = ()

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, *, strategy: Any = None,
                 fsdp_plugin: Any = None, dynamo_plugin: Any = None, precision: Precision | None = None,
                 **kwargs: Any) -> None:
        super().__init__(cpu, strategy=strategy, **kwargs)
        # An Accelerator's state names its precision object's mode; a state made on its own parses the name given.
        self.mixed_precision: str = precision.name if precision is not None else parse_precision(mixed_precision)
        self.fsdp_plugin = fsdp_plugin
        self.dynamo_plugin = dynamo_plugin
        self.deepspeed_plugin = None
        self.megatron_lm_plugin = None

    @property
    def is_fsdp2(self) -> bool:
        return self.distributed_type == DistributedType.FSDP

    def __repr__(self) -> str:
        return super().__repr__() + f"\nMixed precision type: {self.mixed_precision}\n"


class GradientState(_PerAccelerator):
    """The accumulation window and loader of one Accelerator, read live (``accelerator.gradient_state``).

    Attributes:
        sync_gradients: True on the micro-step whose optimizer step updates the weights.
        num_steps: Micro-batches per optimizer step.
        end_of_dataloader: True while the last batch of the innermost loader being iterated is processed.
        active_dataloader: That loader (None outside any loop over a prepared loader).
    """

    __slots__ = ("_accelerator",)

    def __init__(self, gradient_accumulation_plugin: Any = None, *, accelerator: Accelerator | None = None) -> None:
        self._accelerator = accelerator

    @property
    def sync_gradients(self) -> bool:
        return True if self._accelerator is None else self._accelerator.sync_gradients

    @property
    def num_steps(self) -> int:
        return 1 if self._accelerator is None else self._accelerator.gradient_accumulation_steps

    @property
    def sync_each_batch(self) -> bool:
        return False if self._accelerator is None else self._accelerator.sync_each_batch

    @property
    def adjust_scheduler(self) -> bool:
        return True

    @property
    def sync_with_dataloader(self) -> bool:
        """False when windows run across loader ends (``GradientAccumulationPlugin(sync_with_dataloader=False)``)."""
        return True if self._accelerator is None else self._accelerator.sync_with_dataloader

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        return {"num_steps": self.num_steps, "adjust_scheduler": True,
                "sync_with_dataloader": self.sync_with_dataloader, "sync_each_batch": self.sync_each_batch}

    @property
    def dataloader_references(self) -> list[Any]:
        return [None, *(self._accelerator.iterating_loaders if self._accelerator is not None else ())]

    @property
    def active_dataloader(self) -> Any:
        stack = self._accelerator.iterating_loaders if self._accelerator is not None else ()
        return stack[-1] if stack else None

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        loader = self.active_dataloader
        return bool(loader is not None and loader.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """Samples in the last step of the loader being iterated, all processes together (0: that step is full);
        -1 outside a loop over a prepared loader, or where that count is unknown (see ``final_step_samples``)."""
        loader = self.active_dataloader
        return -1 if loader is None else loader.remainder

    def __repr__(self) -> str:
        return (f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
                f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n")


def forward_to_state(function: Callable) -> Callable:
    """An Accelerator method that calls ``function`` (a state method) on ``accelerator.state``."""

    @functools.wraps(function)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return function(self.state, *args, **kwargs)

    return method
