"""``Trainer(strategy="ddp_spawn")``: the processes start when a stage runs, not when the Trainer is built.

``Trainer(devices=N)`` with another strategy makes the whole program N processes (``launch.py`` re-runs it), which
a test session or a notebook cannot be. With ``"ddp_spawn"`` (``"ddp_fork"`` / ``"ddp_notebook"``: the same with
the "fork" start method, for classes defined in a notebook, which "spawn" cannot pickle) the calling process stays
one process. Each ``fit`` / ``validate`` / ``test`` / ``predict`` then:

1. starts N processes through the engine's ``run_in_processes`` (``stoker/accelerator/distributed/spawn.py``, the
   same code as ``notebook_launcher``: the rank environment of ``torchrun``, ``MASTER_ADDR=127.0.0.1``, a free
   ``MASTER_PORT``);
2. in each, builds the Trainer again from the arguments it was constructed with (strategy ``"ddp"``: its
   Accelerator joins the process group the normal distributed way), gives it the caller's callbacks and loggers
   (copies of the same objects), runs the stage on a copy of the module and loaders, and ends the process group;
3. rank 0 returns what the caller keeps (the engine sends it back); the caller waits for every process, then takes
   it (:func:`take_outcome`).

A worker that raises: the engine stops the other workers and raises that exception in the caller (chained to a
``WorkerError`` with the worker's traceback). Every worker has exited when the call returns.

Only what is listed in :class:`Outcome` comes back: anything else a worker changed (attributes of the module or
of a callback outside its ``state_dict``) stays in that process, as with Lightning's ``ddp_spawn``.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..accelerator import Ranks, capture_rng_state, free_port, restore_rng_state, run_in_processes
from ..accelerator import WorkerError  # noqa: F401 - the error a failed stage is chained to, importable from here
from ..loggers.foreign import owns_folder
from .parts import TrainerParts

if TYPE_CHECKING:
    from ..callbacks import Callback
    from ..loggers import Logger
    from .module import TrainingModule

# Lightning's strategy names that start the processes per stage, and the start method each uses.
START_METHODS = {"ddp_spawn": "spawn", "ddp_fork": "fork", "ddp_notebook": "fork"}
_STAGES = ("fit", "validate", "test", "predict")


def start_method(strategy: Any) -> str | None:
    """The start method ``strategy`` names ("spawn" or "fork"), or None when it is no per-stage strategy."""
    return START_METHODS.get(strategy.lower()) if isinstance(strategy, str) else None


def check_spawn(strategy: str, processes: int) -> None:
    """Refuses a per-stage strategy where it cannot start its processes (under a launcher, or "fork" after CUDA
    was initialized: a forked process cannot use it)."""
    if "WORLD_SIZE" in os.environ:
        raise ValueError(f"Trainer(strategy={strategy!r}) starts its own {processes} processes, but this process was "
                         "already started by a launcher (WORLD_SIZE is set). Under torchrun use strategy='ddp'.")
    if start_method(strategy) == "fork" and torch.cuda.is_initialized():
        raise RuntimeError(f"Trainer(strategy={strategy!r}) forks processes, but CUDA is already initialized in "
                           "this one, and a forked process cannot use it. Use strategy='ddp_spawn', or do not touch "
                           "CUDA before the Trainer runs.")


@dataclass
class Launcher:
    """What a Trainer built with a per-stage strategy needs to build itself again in each worker."""

    trainer_class: type
    arguments: dict[str, Any]
    start_method: str
    pids: list[int] = field(default_factory=list)  # the worker processes of the last stage (all exited by then)

    def worker_arguments(self, loggers: list[Logger]) -> dict[str, Any]:
        """The constructor arguments for a worker: the same, with the strategy every worker runs, and the caller's
        loggers (its own built ones too, e.g. ``logger=True``'s), so the worker's agree on their versions."""
        return {**self.arguments, "strategy": "ddp", **({"logger": loggers} if loggers else {})}


class SpawningTrainer(TrainerParts, Protocol):
    """What this module uses of the Trainer (it is imported by the Trainer, so it names it here)."""

    launcher: Launcher | None  # set by remember_arguments (the Trainer's __new__)
    processes_per_node: int


def remember_arguments(cls: type, **kwargs: Any) -> Any:
    """A new Trainer; one built with a per-stage strategy keeps its constructor arguments (the outermost class's,
    whichever subclass adds names) so that each worker can build it again."""
    trainer = object.__new__(cls)
    method = start_method(kwargs.get("strategy"))
    trainer.launcher = Launcher(cls, dict(kwargs), method) if method is not None else None
    return trainer


def runs_in_workers(cls: type) -> type:
    """Class decorator of the core Trainer: ``fit`` / ``validate`` / ``test`` / ``predict`` of a Trainer built with
    a per-stage strategy run in its worker processes (in the caller, and only there: a worker's Trainer has none).
    Its ``__new__`` remembers the arguments (:func:`remember_arguments`)."""
    @functools.wraps(cls.__init__)  # so that inspect.signature(Trainer) still shows the constructor's arguments
    def new(subclass: type, *args: Any, **kwargs: Any) -> Any:
        return remember_arguments(subclass, **kwargs)  # (Trainer takes keywords only: __init__ refuses args)

    cls.__new__ = staticmethod(new)  # type: ignore[method-assign, assignment]
    for name in _STAGES:
        setattr(cls, name, _routed(getattr(cls, name)))
    return cls


def _routed(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def stage(trainer: SpawningTrainer, module: TrainingModule | None = None, *args: Any, **kwargs: Any) -> Any:
        launcher = getattr(trainer, "launcher", None)
        if launcher is None or trainer.processes_per_node < 2:  # one process: it runs here, nothing to spawn
            return method(trainer, module, *args, **kwargs)
        return run_stage(trainer, launcher, method.__name__, module, args, kwargs)
    return stage


@dataclass
class Job:
    """Everything a worker receives (pickled once per worker by the "spawn" start method)."""

    launcher: Launcher
    processes: int
    stage: str
    module: TrainingModule | None
    args: tuple
    kwargs: dict[str, Any]
    callbacks: list[Callback]
    loggers: list[Logger]
    rng: dict[str, Any] | None  # the caller's RNG states ("spawn"; a forked process has them already)


def run_stage(trainer: SpawningTrainer, launcher: Launcher, stage: str, module: TrainingModule | None, args: tuple,
              kwargs: dict[str, Any]) -> Any:
    """Runs ``trainer.<stage>(module, *args, **kwargs)`` in the launcher's worker processes (the engine's
    :func:`run_in_processes`); returns what rank 0's call returned, after the caller's Trainer, module and callbacks
    took rank 0's results."""
    module = trainer.module if module is None else module  # e.g. test() after fit(): the module fit trained
    n = trainer.processes_per_node
    job = Job(launcher, n, stage, module, args, kwargs, list(trainer.callbacks), list(trainer.loggers),
              capture_rng_state() if launcher.start_method == "spawn" else None)
    launcher.pids = []

    def started(pids: list[int]) -> None:
        launcher.pids = pids

    try:
        outcome = run_in_processes(_stage_in_worker, (_payload(job, stage),), ranks=Ranks(n, free_port()),
                                   start_method=launcher.start_method, what=f"Trainer.{stage}()", send_back=True,
                                   started=started)
    except BaseException as error:
        trainer.state.status = "interrupted" if isinstance(error, (KeyboardInterrupt, SystemExit)) else "failed"
        raise
    take_outcome(trainer, module, outcome)
    return outcome.returned


def _payload(job: Job, stage: str) -> Job | bytes:
    """What the workers receive: a forked one inherits the job; for "spawn" it is pickled here, plainly, because
    torch.multiprocessing would move its tensors into memory shared by every process (the caller's module too), and
    each worker's optimizer would then step the same weights."""
    if job.launcher.start_method == "fork":
        return job
    try:
        return pickle.dumps(job)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise TypeError(f"Trainer(strategy='ddp_spawn').{stage}() sends the module, loaders, callbacks and loggers to "
                        f"its processes by pickling them, which failed: {error}. Define their classes and functions "
                        "at module level (not inside a function, not as lambdas), or use strategy='ddp_fork'.") from error


@dataclass
class Outcome:
    """What rank 0 sends back to the caller: the call's return value, the trained weights (fit), the metrics, the
    run's status, the fit loop's position, each callback's ``state_dict`` (by ``state_key``) and the loggers'
    versions."""

    returned: Any
    weights: dict[str, torch.Tensor] | None
    callback_metrics: dict[str, Any]
    logged_metrics: dict[str, Any]
    status: str
    should_stop: bool
    fit_loop: dict[str, Any] | None  # after fit only: another stage's worker never moved its fit loop
    callback_states: dict[str, Any]
    logger_versions: list[Any]


def _on_cpu(value: Any) -> Any:
    """Tensors moved to the CPU, so the caller can read them whatever device (and process) they came from."""
    from ..accelerator import send_to_device

    return send_to_device(value, torch.device("cpu"))


def _collect(trainer: SpawningTrainer, stage: str, returned: Any) -> Outcome:
    module = trainer.module
    weights = {k: v.detach().cpu() for k, v in module.state_dict().items()} if stage == "fit" and module else None
    return Outcome(
        returned=_on_cpu(returned), weights=weights, callback_metrics=_on_cpu(dict(trainer.callback_metrics)),
        logged_metrics=_on_cpu(dict(trainer.logged_metrics)), status=trainer.state.status,
        should_stop=trainer.should_stop, fit_loop=trainer.fit_loop.state_dict() if stage == "fit" else None,
        callback_states={cb.state_key: _on_cpu(cb.state_dict()) for cb in trainer.callbacks},
        logger_versions=[lg.version if owns_folder(lg) and lg.version_chosen else None for lg in trainer.loggers])


def take_outcome(trainer: SpawningTrainer, module: TrainingModule | None, outcome: Outcome) -> None:
    """The caller's Trainer, module and callbacks take rank 0's results."""
    if outcome.weights is not None and module is not None:
        module.load_state_dict(outcome.weights)
    trainer.module = module
    for mine, theirs in ((trainer.callback_metrics, outcome.callback_metrics),
                         (trainer.logged_metrics, outcome.logged_metrics)):
        mine.clear()
        mine.update(theirs)
    trainer.state.status, trainer.should_stop = outcome.status, outcome.should_stop
    if outcome.fit_loop is not None:
        trainer.fit_loop.load_state_dict(outcome.fit_loop)
    for callback in trainer.callbacks:
        state = outcome.callback_states.get(callback.state_key)
        if state is None:
            continue
        if getattr(callback, "dirpath", False) is None and state.get("dirpath"):
            callback.dirpath = state["dirpath"]  # a ModelCheckpoint's folder, chosen in the worker
        callback.load_state_dict(state)
    for logger, version in zip(trainer.loggers, outcome.logger_versions):
        if version is not None and owns_folder(logger) and not logger.version_chosen:
            logger.version = version  # the folder rank 0 wrote to (a new version would be counted otherwise)


def _stage_in_worker(payload: Job | bytes) -> Outcome | None:
    """One worker process (its rank's environment set by the engine): the stage on a Trainer built again from the
    caller's arguments; rank 0 returns what the caller keeps."""
    job = pickle.loads(payload) if isinstance(payload, bytes) else payload
    if job.rng is not None:
        restore_rng_state(job.rng)
    trainer = job.launcher.trainer_class(**job.launcher.worker_arguments(job.loggers))
    trainer.callbacks = job.callbacks  # the caller's, its defaults included, state and all
    returned = getattr(trainer, job.stage)(job.module, *job.args, **job.kwargs)
    outcome = _collect(trainer, job.stage, returned) if trainer.is_global_zero else None
    trainer.accelerator.end_training()  # the process group ends here, before the process does
    return outcome
