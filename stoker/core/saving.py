"""``pytorch_lightning.core.saving``'s names for a run's ``hparams.yaml`` and the older ``meta_tags.csv``
(``stoker/compat/lightning/saving.py``)."""

from stoker.compat.lightning.saving import (load_hparams_from_tags_csv, load_hparams_from_yaml,
                                            save_hparams_to_tags_csv, save_hparams_to_yaml)

__all__ = ["load_hparams_from_tags_csv", "load_hparams_from_yaml", "save_hparams_to_tags_csv", "save_hparams_to_yaml"]
