"""Lightning's ``utilities.exceptions`` names for renamed scripts.

Stoker reports a bad set-up as ``ValueError`` (a bad value) or ``TypeError`` (a bad type), never with a class of its
own, so ``MisconfigurationException`` is ``ValueError``: ``except MisconfigurationException`` in a renamed script
catches what Lightning's name caught for bad values.
"""

MisconfigurationException = ValueError

__all__ = ["MisconfigurationException"]
