"""``pytorch_lightning.utilities.warnings``'s ``PossibleUserWarning``: stoker's category for the warnings about a
setting that may be intended (``stoker/user_frame.py``), so that ``warnings.filterwarnings("ignore",
category=PossibleUserWarning)`` in a renamed script silences the same warnings it did."""

from stoker.user_frame import PossibleUserWarning

__all__ = ["PossibleUserWarning"]
