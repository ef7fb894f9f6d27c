"""``stoker.utilities.data.has_len_all_ranks``: a loader's length, checked on every process."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Trainer
from stoker.utilities.data import has_len_all_ranks


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(4.0))


class OtherProcessesHold:
    """A two-process strategy seen from one process: the other process holds ``others`` batches."""

    def __init__(self, others: int) -> None:
        self.others = others

    def reduce(self, tensor: torch.Tensor, reduce_op: str = "mean") -> torch.Tensor:
        assert reduce_op == "sum"
        return tensor + self.others


def test_a_sized_loader_has_a_length_and_an_iterable_one_has_none() -> None:
    strategy = Trainer(accelerator="cpu", logger=False).strategy
    assert has_len_all_ranks(DataLoader(torch.arange(10.0), batch_size=4), strategy)
    assert not has_len_all_ranks(DataLoader(Stream(), batch_size=2), strategy)


def test_empty_everywhere_warns_and_empty_here_only_raises_unless_allowed() -> None:
    empty = DataLoader(torch.arange(0.0), batch_size=2)
    with pytest.warns(UserWarning, match=r"^Total length of `DataLoader` across ranks is zero.*no batches on any "
                                         r"process"):
        assert has_len_all_ranks(empty, OtherProcessesHold(0))
    with pytest.raises(RuntimeError, match="no batches on this process while others have some"):
        has_len_all_ranks(empty, OtherProcessesHold(3))
    with pytest.warns(UserWarning, match="on this process while others"):
        assert has_len_all_ranks(empty, OtherProcessesHold(3), allow_zero_length_dataloader_with_multiple_devices=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert has_len_all_ranks(DataLoader(torch.arange(4.0), batch_size=2), OtherProcessesHold(2))


def test_the_version_flags_follow_the_installed_packages() -> None:
    from stoker.utilities import imports

    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    assert imports._TORCH_GREATER_EQUAL_2_8 is ((major, minor) >= (2, 8))
    assert imports._version_at_least("torch", (major, minor)) and not imports._version_at_least("torch", (major + 1,))
    assert not imports._version_at_least("no-such-package-anywhere", (0,))
    import importlib.util

    assert imports._RICH_AVAILABLE is (importlib.util.find_spec("rich") is not None)


def test_the_torchvision_flag_follows_the_installed_package() -> None:
    """Lightning's test_cli.py reads ``_TORCHVISION_AVAILABLE`` at import (a skipif); a renamed script may too."""
    import importlib.util

    from stoker.utilities.imports import _TORCHVISION_AVAILABLE

    assert _TORCHVISION_AVAILABLE is (importlib.util.find_spec("torchvision") is not None)
