"""``stoker launch``: Accelerate's launch flags, run by torch's own elastic launcher (what ``torchrun`` runs).

``stoker launch --num_processes 2 --mixed_precision bf16 train.py --lr 3e-4`` starts ``train.py`` in two processes
with the ``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) and passes the run's settings to
every Accelerator built without them, through ``STOKER_*`` and Accelerate's ``ACCELERATE_*`` variables
(`stoker.accelerator.environment`). One process on one machine needs no launcher: the script replaces this process
(so signals reach it directly). Otherwise torch's launcher supervises the workers: one that fails stops the others,
and SIGTERM/SIGINT sent to ``stoker launch`` are forwarded to every worker before it exits with ``128 + signal``.

It owns the mapping from Accelerate's flags to torchrun's; rendezvous, process supervision and signal forwarding
are torch's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..accelerator import check_accumulation_steps, describe_failures, run_outcome

__all__ = ["add_parser", "launch_environment", "resolve", "run", "torchrun_args"]

_PRECISIONS = ("no", "fp16", "bf16")
# Flag -> (type, help). Every flag also accepts the dashed spelling (--num-processes).
_FLAGS: dict[str, tuple[Any, str]] = {
    "config_file": (str, "an Accelerate config YAML (what `accelerate config` writes); flags override its keys"),
    "num_processes": (int, "processes in total, over all machines (default: every GPU, or 1)"),
    "num_machines": (int, "machines taking part (default 1)"),
    "machine_rank": (int, "this machine's rank, 0 to num_machines-1 (default 0)"),
    "main_process_ip": (str, "address of the machine with rank 0 (needed with --num_machines > 1)"),
    "main_process_port": (int, "port on the main machine (default: a free port on one machine, 29500 on several)"),
    "mixed_precision": (str, "precision for Accelerators built without mixed_precision: no, fp16 or bf16"),
    "gradient_accumulation_steps": (int, "accumulation for Accelerators built without gradient_accumulation_steps"),
    "gpu_ids": (str, "GPUs to use, e.g. '0,1' (sets CUDA_VISIBLE_DEVICES)"),
    "num_cpu_threads_per_process": (int, "OMP_NUM_THREADS for each process (default: torch's choice, 1)"),
    "rdzv_backend": (str, "rendezvous with several machines: 'static' (default) or 'c10d'"),
    "max_restarts": (int, "restarts of the whole group after a worker fails (default 0)"),
    "monitor_interval": (float, "seconds between checks of the workers (default 0.1)"),
}
_SWITCHES = {
    "cpu": "run on the CPU even when GPUs are present (gloo between processes)",
    "multi_gpu": "one process per GPU (the default process count is every visible GPU)",
    "same_network": "accepted for Accelerate compatibility (several machines always meet at --main_process_ip)",
}


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Adds ``launch`` to the ``stoker`` command's subparsers."""
    parser = commands.add_parser(
        "launch", help="run a training script in one or more processes (Accelerate's flags, torch's launcher)",
        description="Run a training script in one or more processes: Accelerate's launch flags, torch's elastic "
                    "launcher (what torchrun runs).")
    for name, (kind, text) in _FLAGS.items():
        parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", type=kind, default=None, help=text)
    for name, text in _SWITCHES.items():
        extra = ["--use_cpu"] if name == "cpu" else []
        parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", *extra, action="store_true", default=None,
                            help=text)
    parser.add_argument("-m", "--module", action="store_true", help="run training_script as a module (python -m)")
    parser.add_argument("training_script", help="the script (or module, with -m) to run in every process")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its arguments")
    parser.set_defaults(run=run)
    return parser


def resolve(args: argparse.Namespace, gpu_count: int | None = None) -> dict[str, Any]:
    """The launch settings: flags first, then ``--config_file``, then defaults; checked.

    Raises:
        ValueError: a setting is out of range or settings contradict each other (the message says which); for
            ``gradient_accumulation_steps`` the engine's ``InvalidArgumentError`` (a ``TypeError`` for a non-int),
            as from the Accelerator.
    """
    settings: dict[str, Any] = {}
    if args.config_file:
        # Accelerate's file format is compat's; the command line is a face over the library, like stoker/__init__.
        from ..compat.accelerate.config_file import read_accelerate_config

        settings, ignored = read_accelerate_config(args.config_file)
        if ignored:
            print(f"stoker launch: ignoring {', '.join(ignored)} from {args.config_file} (choose these in the script, "
                  "e.g. Accelerator(strategy='fsdp')).", file=sys.stderr)
    for name in (*_FLAGS, *_SWITCHES):
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = value
    cpu, multi_gpu = bool(settings.get("cpu")), bool(settings.get("multi_gpu"))
    if gpu_count is None:
        gpu_count = _gpu_count() if not cpu else 0
    if cpu and multi_gpu:
        raise ValueError("stoker launch: --cpu and --multi_gpu contradict each other; pass one.")
    if multi_gpu and gpu_count == 0:
        raise ValueError("stoker launch --multi_gpu: no GPU is visible. For processes on the CPU pass "
                         "--cpu --num_processes N.")
    if settings.get("num_processes") is None:
        settings["num_processes"] = max(gpu_count, 1)
    settings.setdefault("num_machines", 1)
    settings.setdefault("machine_rank", 0)
    _check(settings)
    return settings


def _check(s: dict[str, Any]) -> None:
    processes, machines, rank = int(s["num_processes"]), int(s["num_machines"]), int(s["machine_rank"])
    if processes < 1 or machines < 1:
        raise ValueError(f"stoker launch: --num_processes {processes} and --num_machines {machines} must be >= 1.")
    if processes % machines:
        raise ValueError(f"stoker launch: --num_processes {processes} is the total over all machines and must be a "
                         f"multiple of --num_machines {machines} (each machine runs the same number).")
    if not 0 <= rank < machines:
        raise ValueError(f"stoker launch: --machine_rank {rank} must be in 0..{machines - 1} "
                         f"(--num_machines {machines}).")
    if machines > 1 and not s.get("main_process_ip"):
        raise ValueError("stoker launch --num_machines > 1 needs --main_process_ip: the address of the machine "
                         "with --machine_rank 0, the same on every machine.")
    precision = s.get("mixed_precision")
    if precision is not None and str(precision).lower() not in _PRECISIONS:
        raise ValueError(f"stoker launch --mixed_precision {precision!r}: expected one of {', '.join(_PRECISIONS)}.")
    steps = s.get("gradient_accumulation_steps")
    if steps is not None:  # the engine's check (a ValueError or TypeError: `run` reports both)
        s["gradient_accumulation_steps"] = check_accumulation_steps(
            _config_int(steps), argument="stoker launch --gradient_accumulation_steps ...")
    if s.get("rdzv_backend") not in (None, "static", "c10d"):
        raise ValueError(f"stoker launch --rdzv_backend {s['rdzv_backend']!r}: expected 'static' or 'c10d'.")


def _config_int(value: Any) -> Any:
    """A config file's number written as text (``"4"``) as an int; anything else as it is, for the check to judge."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def launch_environment(settings: dict[str, Any]) -> dict[str, str]:
    """The variables every process gets (stoker's and Accelerate's names for each setting)."""
    env: dict[str, str] = {}
    if settings.get("mixed_precision") is not None:
        env["STOKER_MIXED_PRECISION"] = env["ACCELERATE_MIXED_PRECISION"] = str(settings["mixed_precision"]).lower()
    if settings.get("gradient_accumulation_steps") is not None:
        steps = str(int(settings["gradient_accumulation_steps"]))
        env["STOKER_GRADIENT_ACCUMULATION_STEPS"] = env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = steps
    if settings.get("cpu"):
        env["STOKER_USE_CPU"] = env["ACCELERATE_USE_CPU"] = "true"
    if settings.get("gpu_ids") is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(settings["gpu_ids"]).replace(" ", "")
    if settings.get("num_cpu_threads_per_process") is not None:
        env["OMP_NUM_THREADS"] = str(int(settings["num_cpu_threads_per_process"]))
    return env


def torchrun_args(settings: dict[str, Any], script: str, script_args: list[str], module: bool = False) -> list[str]:
    """The ``torchrun`` command line (without the program name) for these settings."""
    machines = int(settings["num_machines"])
    argv = [f"--nproc-per-node={int(settings['num_processes']) // machines}", f"--nnodes={machines}",
            f"--max-restarts={int(settings.get('max_restarts') or 0)}",
            f"--monitor-interval={float(settings.get('monitor_interval') or 0.1)}"]
    port = settings.get("main_process_port")
    if machines > 1:
        address = str(settings["main_process_ip"])
        port = int(port or 29500)
        if settings.get("rdzv_backend") == "c10d":
            argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={address}:{port}", "--rdzv-id=stoker"]
        else:
            argv += [f"--node-rank={int(settings['machine_rank'])}", f"--master-addr={address}",
                     f"--master-port={port}"]
    elif port:
        argv += ["--master-addr=127.0.0.1", f"--master-port={int(port)}"]
    else:
        argv += ["--standalone"]  # a c10d rendezvous on a free local port
    if module:
        argv.append("--module")
    return [*argv, script, *script_args]


def run(args: argparse.Namespace) -> int:
    """Runs ``stoker launch``; returns the exit status (the script's, or ``128 + signal`` when stopped by one)."""
    try:
        settings = resolve(args)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.environ.update(launch_environment(settings))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"):
        os.environ.pop(key, None)  # an outer launcher's ranks must not leak into ours
    if int(settings["num_processes"]) == 1 and int(settings["num_machines"]) == 1:
        command = [sys.executable, *(["-m"] if args.module else []), args.training_script, *args.training_script_args]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, command)  # no launcher needed: signals go straight to the script
    return _run_torchrun(torchrun_args(settings, args.training_script, args.training_script_args, args.module),
                         int(settings["num_processes"]))


def _run_torchrun(argv: list[str], processes: int) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as torchrun

    try:
        torchrun(parse_args(argv))
    except ChildFailedError as error:
        ranks, code = describe_failures(error.failures)  # a rank that failed on its own first
        print(f"stoker launch: the {processes}-process run {run_outcome(code)}: {ranks}.", file=sys.stderr,
              flush=True)
        return code
    except SignalException as signal_:  # torch's agent has already sent the signal to every worker
        print(f"stoker launch: stopped by signal {int(signal_.sigval)}; the workers were sent it too.",
              file=sys.stderr, flush=True)
        return 128 + int(signal_.sigval)
    return 0


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
