"""Lightning's ``pytorch_lightning.utilities.model_summary`` module path (see ``model_summary.py``)."""

from .model_summary import (LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, UNKNOWN_SIZE, ModelSummary,
                            get_human_readable_count, summarize)

__all__ = ["LEFTOVER_PARAMS_NAME", "NOT_APPLICABLE", "UNKNOWN_SIZE", "ModelSummary", "get_human_readable_count",
           "summarize"]
