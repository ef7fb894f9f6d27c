"""Lightning's ``pytorch_lightning.utilities`` names that user scripts import, so that a script runs after renaming
``pytorch_lightning`` (or ``lightning.pytorch``) to ``stoker``: ``rank_zero_only`` and the ``rank_zero_*`` messages
(also as ``stoker.utilities.rank_zero``), ``CombinedLoader`` (also as ``stoker.utilities.combined_loader``),
``AttributeDict`` and ``is_picklable`` (also as ``stoker.utilities.parsing``), and the type aliases of
``stoker.utilities.types``. (Accelerate's ``accelerate.utils`` is ``stoker.utils``.)
"""

from .combined_loader import CombinedLoader
from .parsing import AttributeDict, is_picklable
from .rank_zero import rank_zero_debug, rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["AttributeDict", "CombinedLoader", "is_picklable", "rank_zero_debug", "rank_zero_info", "rank_zero_only",
           "rank_zero_warn"]
