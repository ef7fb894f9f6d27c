"""``Trainer(strategy="ddp_spawn")``: the processes start when a stage runs, not when the Trainer is built.

``Trainer(devices=N)`` with another strategy makes the whole program N processes (``launch.py`` re-runs it), which
a test session or a notebook cannot be. With ``"ddp_spawn"`` (``"ddp_fork"`` / ``"ddp_notebook"``: the same with
the "fork" start method, for classes defined in a notebook, which "spawn" cannot pickle) the calling process stays
one process. Each ``fit`` / ``validate`` / ``test`` / ``predict`` then:

1. starts N processes with ``torch.multiprocessing`` (the rank environment of ``torchrun``: ``RANK``,
   ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``);
2. in each, builds the Trainer again from the arguments it was constructed with (strategy ``"ddp"``: its
   Accelerator joins the process group the normal distributed way), gives it the caller's callbacks and loggers
   (copies of the same objects), runs the stage on a copy of the module and loaders, and ends the process group;
3. rank 0 writes what the caller keeps to a file; the caller waits for every process, then reads it back
   (:func:`take_outcome`).

A worker that raises writes its exception and traceback before it exits; the caller stops the other workers and
raises that exception (chained to the worker's traceback). Every worker has exited when the call returns.

Only what is listed in :class:`Outcome` comes back: anything else a worker changed (attributes of the module or
of a callback outside its ``state_dict``) stays in that process, as with Lightning's ``ddp_spawn``.
"""

from __future__ import annotations

import functools
import os
import pickle
import shutil
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..accelerator import capture_rng_state, restore_rng_state
from ..loggers.foreign import owns_folder
from .parts import TrainerParts

if TYPE_CHECKING:
    from ..callbacks import Callback
    from ..loggers import Logger
    from .module import TrainingModule

# Lightning's strategy names that start the processes per stage, and the start method each uses.
START_METHODS = {"ddp_spawn": "spawn", "ddp_fork": "fork", "ddp_notebook": "fork"}
_STAGES = ("fit", "validate", "test", "predict")
_OUTCOME, _ERROR = "outcome.pt", "error-{rank}.pt"


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
    folder: str
    port: int
    rng: dict[str, Any] | None  # the caller's RNG states ("spawn"; a forked process has them already)

    def environment(self, rank: int) -> dict[str, str]:
        n = str(self.processes)
        return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": n, "LOCAL_WORLD_SIZE": n, "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port)}


def run_stage(trainer: SpawningTrainer, launcher: Launcher, stage: str, module: TrainingModule | None, args: tuple,
              kwargs: dict[str, Any]) -> Any:
    """Runs ``trainer.<stage>(module, *args, **kwargs)`` in the launcher's worker processes; returns what rank 0's
    call returned, after the caller's Trainer, module and callbacks took rank 0's results."""
    import torch.multiprocessing as mp

    module = trainer.module if module is None else module  # e.g. test() after fit(): the module fit trained
    folder = tempfile.mkdtemp(prefix="stoker-spawn-")
    try:
        n = trainer.processes_per_node
        job = Job(launcher, n, stage, module, args, kwargs, list(trainer.callbacks), list(trainer.loggers), folder,
                  _free_port(), capture_rng_state() if launcher.start_method == "spawn" else None)
        context = mp.start_processes(_worker, args=(_payload(job, stage),), nprocs=n, join=False,
                                     start_method=launcher.start_method)
        launcher.pids = [p.pid for p in context.processes]
        try:
            _wait(context, folder, stage, n)
        except BaseException as error:
            trainer.state.status = "interrupted" if isinstance(error, (KeyboardInterrupt, SystemExit)) else "failed"
            raise
        finally:
            _stop(context.processes)
        outcome = torch.load(os.path.join(folder, _OUTCOME), weights_only=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(context: Any, folder: str, stage: str, processes: int) -> None:
    """Waits for every worker; a failed one: the others are stopped (SIGTERM, then SIGKILL after 5 s each) and its
    error is raised here."""
    from torch.multiprocessing.spawn import ProcessException

    try:
        while not context.join(grace_period=5):
            pass
    except ProcessException as failure:
        raise_worker_error(folder, stage, processes, failure)


def _stop(processes: list[Any]) -> None:
    """Ends the workers still running (the caller was interrupted, e.g. by Ctrl-C) and reaps every one."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


class WorkerError(RuntimeError):
    """A worker process of ``Trainer(strategy="ddp_spawn")`` failed; the message holds its traceback."""


def raise_worker_error(folder: str, stage: str, processes: int, failure: Exception) -> None:
    """Raises the exception of the worker that failed first (its own type, chained to a :class:`WorkerError` with
    the worker's traceback); a :class:`WorkerError` alone when none was recorded (a worker killed by a signal)."""
    reports = []
    for name in os.listdir(folder):
        if name.startswith("error-"):
            try:
                reports.append(torch.load(os.path.join(folder, name), weights_only=False))
            except Exception:  # a report cut short by the stop of its process: the others tell the story
                continue
    if not reports:
        raise WorkerError(f"Trainer.{stage}() with {processes} processes: {failure}. The worker printed its own "
                          "output above, if any.")
    first = min(reports, key=lambda report: report["time"])
    cause = WorkerError(f"Trainer.{stage}() failed in worker rank {first['rank']} of {processes}:\n\n"
                        f"{first['trace']}")
    try:
        error = pickle.loads(first["error"]) if first["error"] is not None else None
    except Exception:  # an exception class that cannot be rebuilt here (e.g. required keyword arguments)
        error = None
    if not isinstance(error, BaseException):
        raise cause
    raise error from cause


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


def _worker(rank: int, payload: Job | bytes) -> None:
    """One worker process: the stage on a Trainer built again from the caller's arguments."""
    job = pickle.loads(payload) if isinstance(payload, bytes) else payload  # an error here: torch's own report
    try:
        os.environ.update(job.environment(rank))
        if job.rng is not None:
            restore_rng_state(job.rng)
        # N processes share the cores (torchrun's OMP_NUM_THREADS=1 would come too late: torch is imported).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.processes))
        _run(job)
    except BaseException as error:  # noqa: B036 - reported, then the process ends without waiting for the others
        _report(job.folder, rank, error)
        # Not a normal exit: its exit handlers would wait on a process group whose other members may be blocked
        # in a collective for this one; the caller stops them.
        os._exit(1)


def _run(job: Job) -> None:
    trainer = job.launcher.trainer_class(**job.launcher.worker_arguments(job.loggers))
    trainer.callbacks = job.callbacks  # the caller's, its defaults included, state and all
    returned = getattr(trainer, job.stage)(job.module, *job.args, **job.kwargs)
    if trainer.is_global_zero:
        outcome = _collect(trainer, job.stage, returned)
        partial = os.path.join(job.folder, _OUTCOME + ".partial")
        torch.save(outcome, partial)
        os.replace(partial, os.path.join(job.folder, _OUTCOME))  # read only once every worker has exited
    trainer.accelerator.end_training()  # the process group ends here, before the process does


def _report(folder: str, rank: int, error: BaseException) -> None:
    """Writes the worker's exception (None when it cannot be pickled) and traceback for the caller; prints the
    traceback too, where the worker's output goes."""
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    print(f"[rank {rank}] {trace}", file=sys.stderr, flush=True)
    try:
        pickled: bytes | None = pickle.dumps(error)
    except Exception:  # an exception that does not pickle: its traceback still goes back
        pickled = None
    torch.save({"rank": rank, "time": time.time(), "trace": trace, "error": pickled},
               os.path.join(folder, _ERROR.format(rank=rank)))
    sys.stdout.flush()
