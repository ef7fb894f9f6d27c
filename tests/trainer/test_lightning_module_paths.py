"""Lightning's module paths that renamed scripts import: ``stoker.core``, ``stoker.utilities.exceptions`` /
``imports`` / ``model_helpers``."""

from __future__ import annotations

import pytest

from stoker import Callback, LightningDataModule, LightningModule, ModelCheckpoint
from tests.helpers.models import Regressor


def test_core_paths_are_the_package_classes():
    from stoker.core import LightningModule as core_module
    from stoker.core.datamodule import LightningDataModule as dm
    from stoker.core.module import LightningModule as module

    assert module is core_module is LightningModule and dm is LightningDataModule


def test_misconfiguration_is_what_stoker_raises_for_bad_values():
    from stoker.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match="save_top_k=3, monitor=None"):
        ModelCheckpoint(save_top_k=3)


def test_version_flags():
    from stoker.utilities.imports import _version_at_least

    assert _version_at_least("torch", (1, 0)) and not _version_at_least("torch", (999,))
    assert not _version_at_least("no-such-package-here", (0,))


def test_is_overridden():
    from stoker.utilities.model_helpers import is_overridden

    module = Regressor()
    assert is_overridden("training_step", module) and not is_overridden("on_fit_start", module)
    module.on_fit_start = lambda: None
    assert is_overridden("on_fit_start", module)
    assert not is_overridden("on_fit_start", Callback()) and not is_overridden("x", None)
    with pytest.raises(ValueError, match="expected a TrainingModule"):
        is_overridden("forward", object())
