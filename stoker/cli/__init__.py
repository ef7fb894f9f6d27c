"""The ``stoker`` command: ``stoker launch`` (start a script in N processes) and ``stoker env`` (a bug report's facts).

Installed as a console script by ``pip install stoker``; ``python -m stoker ...`` does the same. Each subcommand lives
in its own module: `stoker.cli.launch` (Accelerate config files: `stoker.compat.accelerate.config_file`) and
`stoker.cli.env`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


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
