"""``stoker env``: what a bug report needs — versions, devices, distributed backends and the launch environment.

Paste its output into an issue. ``--json`` prints the same facts as one JSON object. Optional packages are looked up
by their installed metadata, not imported (importing W&B or MLflow costs seconds and can print).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

__all__ = ["add_parser", "collect", "format_report", "run"]

_REQUIRED = ("torch", "torchdata", "numpy", "safetensors", "torchmetrics", "tensorboard", "tqdm", "pyyaml")
_OPTIONAL = ("wandb", "mlflow", "accelerate", "pytorch-lightning", "lightning", "transformers", "deepspeed")
_ENV_PREFIXES = ("STOKER_", "ACCELERATE_", "TORCHELASTIC_", "NCCL_", "MLFLOW_TRACKING_URI", "WANDB_MODE")
_ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Adds ``env`` to the ``stoker`` command's subparsers."""
    parser = commands.add_parser("env", help="print versions, devices and backends for a bug report",
                                 description="Print versions, devices, distributed backends and the launch "
                                             "environment: paste it into a bug report.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    facts = collect()
    print(json.dumps(facts, indent=2) if args.json else format_report(facts))
    return 0


def collect() -> dict[str, Any]:
    """Every fact ``stoker env`` reports, as plain data."""
    import torch

    import stoker

    return {
        "stoker": stoker.__version__,
        "python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in _REQUIRED},
        "optional": {name: _version(name) for name in _OPTIONAL if _version(name) is not None},
        "cpu": {"cores": os.cpu_count(), "threads": torch.get_num_threads(), "memory_gb": _memory_gb()},
        "cuda": _cuda(torch),
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
        "xpu": bool(hasattr(torch, "xpu") and torch.xpu.is_available()),
        "distributed": _backends(torch),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)},
    }


def format_report(facts: dict[str, Any]) -> str:
    """The text ``stoker env`` prints: one ``- name: value`` line per fact."""
    cuda = facts["cuda"]
    lines = ["Copy and paste the text below into your bug report.", "",
             f"- stoker: {facts['stoker']}", f"- Python: {facts['python']}", f"- Platform: {facts['platform']}"]
    lines += [f"- {name}: {version or 'not installed'}" for name, version in facts["packages"].items()]
    lines += [f"- {name} (optional): {version}" for name, version in facts["optional"].items()]
    cpu = facts["cpu"]
    lines.append(f"- CPU: {cpu['cores']} cores, torch uses {cpu['threads']} threads, "
                 f"{cpu['memory_gb'] if cpu['memory_gb'] is not None else '?'} GB memory")
    lines.append(f"- CUDA available: {cuda['available']} (torch built with CUDA {cuda['build']}, cuDNN "
                 f"{cuda['cudnn']}, NCCL {cuda['nccl']})")
    lines += [f"    GPU {i}: {gpu}" for i, gpu in enumerate(cuda["devices"])]
    lines.append(f"- MPS available: {facts['mps']}")
    if facts["xpu"]:
        lines.append("- XPU available: True")
    backends = facts["distributed"]
    lines.append("- Distributed backends: " + (", ".join(n for n, ok in backends.items() if ok) or "none"))
    env = facts["environment"]
    lines.append("- Launch environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "none set"))
    return "\n".join(lines)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def _cuda(torch: Any) -> dict[str, Any]:
    available = torch.cuda.is_available()
    devices = []
    if available:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(f"{p.name}, {p.total_memory / 2**30:.1f} GB, compute capability {p.major}.{p.minor}")
    nccl = None
    if available and hasattr(torch.cuda, "nccl"):
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # NCCL missing from this build: reported as None
            nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"available": available, "build": torch.version.cuda, "cudnn": cudnn, "nccl": nccl, "devices": devices}


def _backends(torch: Any) -> dict[str, bool]:
    dist = torch.distributed
    if not dist.is_available():
        return {}
    checks = {"gloo": "is_gloo_available", "nccl": "is_nccl_available", "mpi": "is_mpi_available",
              "ucc": "is_ucc_available", "xccl": "is_xccl_available"}
    return {name: bool(getattr(dist, fn, lambda: False)()) for name, fn in checks.items()}
