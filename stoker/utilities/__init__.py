"""Lightning's ``pytorch_lightning.utilities`` names that user scripts import, so that a script runs after renaming
``pytorch_lightning`` (or ``lightning.pytorch``) to ``stoker``: ``rank_zero_only`` and the ``rank_zero_*`` messages
(also as ``stoker.utilities.rank_zero``), ``CombinedLoader`` (also as ``stoker.utilities.combined_loader``),
``AttributeDict`` and ``is_picklable`` (also as ``stoker.utilities.parsing``), ``grad_norm`` (also as
``stoker.utilities.grads``), ``GradClipAlgorithmType`` (``stoker/compat/lightning/enums.py``) and the type aliases of
``stoker.utilities.types``, and the general helpers of ``general.py`` (``disable_possible_user_warnings``,
``measure_flops``, ``move_data_to_device``, ``suggested_max_num_workers``), ``find_shared_parameters`` and
``set_shared_parameters`` (also as ``stoker.utilities.parameter_tying``). ``CombinedLoader``, ``grad_norm`` and ``GradClipAlgorithmType`` are loaded when asked
for: they live with the Trainer, which the other names here do not need. (Accelerate's ``accelerate.utils`` is
``stoker.utils``.)
"""

from .general import disable_possible_user_warnings, measure_flops, move_data_to_device, suggested_max_num_workers
from .parameter_tying import find_shared_parameters, set_shared_parameters
from .parsing import AttributeDict, is_picklable
from .rank_zero import rank_zero_debug, rank_zero_deprecation, rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["AttributeDict", "CombinedLoader", "GradClipAlgorithmType", "disable_possible_user_warnings",
           "find_shared_parameters", "grad_norm", "is_picklable", "measure_flops", "move_data_to_device",
           "rank_zero_debug", "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn",
           "set_shared_parameters", "suggested_max_num_workers"]


def __getattr__(name: str) -> object:
    # Imported on first use: these load the whole Trainer.
    if name == "GradClipAlgorithmType":
        from stoker.compat.lightning.enums import GradClipAlgorithmType

        return GradClipAlgorithmType
    if name == "CombinedLoader":
        from .combined_loader import CombinedLoader

        return CombinedLoader
    if name == "grad_norm":
        from .grads import grad_norm

        return grad_norm
    raise AttributeError(f"module 'stoker.utilities' has no attribute {name!r}")
