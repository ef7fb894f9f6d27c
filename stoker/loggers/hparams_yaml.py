"""``hparams.yaml``: the hyperparameters a run's loggers keep beside their logs, in block YAML as Lightning's.

The TensorBoard and CSV loggers of one run share their folder and write the same content here; pyyaml is imported
only when a file is written (``import stoker`` stays light).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

__all__ = ["HPARAMS_YAML", "ensure_hparams_yaml", "write_hparams_yaml", "yaml_text"]

HPARAMS_YAML = "hparams.yaml"  # Lightning's name for a run's hyperparameters beside its logs


def write_hparams_yaml(folder: str, hparams: Mapping[str, Any]) -> None:
    """``hparams`` as ``{folder}/hparams.yaml`` in block YAML (as Lightning writes it; ``yaml.safe_load`` and
    ``load_from_checkpoint(hparams_file=...)`` read it back), replacing the file in one step. Values YAML cannot
    hold safely (objects) are written as their ``str``; tuples as lists. The CSV and TensorBoard loggers of one run
    share the folder and write the same content."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, HPARAMS_YAML)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(yaml_text(hparams))
    os.replace(tmp, path)


def yaml_text(hparams: Mapping[str, Any]) -> str:
    """``hparams`` as the block YAML of an ``hparams.yaml`` (see :func:`write_hparams_yaml`)."""
    import yaml

    return yaml.safe_dump(_yaml_safe(hparams), default_flow_style=False, sort_keys=False, allow_unicode=True)


def ensure_hparams_yaml(folder: str, hparams: Mapping[str, Any]) -> None:
    """``hparams.yaml`` in ``folder`` unless it is there already: a run's folder always holds one, as Lightning's
    (``{}`` for a module without hyperparameters)."""
    if not os.path.isfile(os.path.join(folder, HPARAMS_YAML)):
        write_hparams_yaml(folder, hparams)


def _yaml_safe(value: Any) -> Any:
    """``value`` with only what ``yaml.safe_dump`` writes: mappings (str keys), lists, and plain scalars."""
    if isinstance(value, Mapping):
        return {str(k): _yaml_safe(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):  # an OmegaConf ListConfig too
        return [_yaml_safe(v) for v in value]
    if isinstance(value, Enum):
        return value.name  # Lightning's form of an enum member (a str or int enum is no plain scalar to safe_dump)
    if value is None or type(value) in (bool, int, float, str):
        return value
    plain = next((t for t in (bool, int, float, str) if isinstance(value, t)), str)  # a subclass: numpy's float64
    return plain(value)
