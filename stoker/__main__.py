"""``python -m stoker launch ...`` / ``python -m stoker env``: the same as the ``stoker`` console script."""

from stoker.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
