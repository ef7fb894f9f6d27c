"""``stoker.utilities.seed.isolate_rng`` (Lightning's ``utilities.seed`` path): the block's draws leave no trace."""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
import torch

from stoker.utilities.seed import isolate_rng


def test_every_global_generator_is_put_back_after_the_block() -> None:
    torch.manual_seed(3)
    with isolate_rng():
        inside = (torch.rand(2), np.random.rand(2), random.random())
    after = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(inside[0], after[0]) and np.array_equal(inside[1], after[1]) and inside[2] == after[2]


def test_also_when_the_block_raises() -> None:
    first = torch.rand(1)  # noqa: F841 (moves the generator on)
    with pytest.raises(RuntimeError, match="stop"), isolate_rng():
        drawn = torch.rand(3)
        raise RuntimeError("stop")
    assert torch.equal(torch.rand(3), drawn)


def test_include_cuda_false_never_touches_cuda() -> None:
    with mock.patch("torch.cuda.is_available", return_value=True), \
            mock.patch("torch.cuda.device_count", return_value=1), \
            mock.patch("torch.cuda.get_rng_state_all", return_value=[torch.zeros(8, dtype=torch.uint8)]) as get_all, \
            mock.patch("torch.cuda.set_rng_state") as set_all:
        with isolate_rng(include_cuda=False):
            pass
        get_all.assert_not_called()
        set_all.assert_not_called()
        with isolate_rng():
            pass
        get_all.assert_called_once()
        set_all.assert_called_once()
