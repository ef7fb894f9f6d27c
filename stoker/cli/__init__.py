"""Command lines: the ``stoker`` command (``stoker launch``: a script in N processes; ``stoker env``: a bug
report's facts) and a training script's own command line, ``LightningCLI`` (Lightning's ``lightning.pytorch.cli``
renamed: ``from stoker.cli import LightningCLI``).

``stoker`` is installed as a console script by ``pip install stoker``; ``python -m stoker ...`` does the same. Each
subcommand lives in its own module: `stoker.cli.launch` (Accelerate config files:
`stoker.compat.accelerate.config_file`) and `stoker.cli.env`. ``LightningCLI`` and its parts (`lightning_cli`,
`parser`, `optimizers`, `save_config`, `checkpoint_hparams`) need jsonargparse (``pip install 'stoker[cli]'``) and
are imported on first use, so ``import stoker`` and ``stoker launch`` never import it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["ArgsType", "LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion",
           "LightningArgumentParser", "LightningCLI", "OptimizerCallable", "ReduceLROnPlateau", "SaveConfigCallback",
           "instantiate_class", "instantiate_module", "main"]

# name -> the module of this package that defines it (imported on first use: jsonargparse only when needed)
_LAZY = {
    "LightningCLI": "lightning_cli", "ArgsType": "lightning_cli",
    "LightningArgumentParser": "parser",
    "SaveConfigCallback": "save_config",
    "ReduceLROnPlateau": "optimizers", "LRSchedulerTypeTuple": "optimizers", "LRSchedulerTypeUnion": "optimizers",
    "LRSchedulerType": "optimizers", "OptimizerCallable": "optimizers", "LRSchedulerCallable": "optimizers",
    "instantiate_class": "optimizers",
    "instantiate_module": "module_hparams",
}
# Lightning's flag (scripts test it before importing jsonargparse's names): whether the extra is installed.
_JSONARGPARSE_SIGNATURES_AVAILABLE = importlib.util.find_spec("jsonargparse") is not None


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``stoker <command> ...``; returns the exit status (``launch`` returns its script's status).

    Example:
        >>> main(["env"])  # doctest: +SKIP
    """
    from . import env, launch

    parser = argparse.ArgumentParser(prog="stoker", description="stoker's command-line tools.")
    commands = parser.add_subparsers(dest="command", metavar="{launch,env}")
    launch.add_parser(commands)
    env.add_parser(commands)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)
