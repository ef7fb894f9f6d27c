"""``Trainer(sync_batchnorm=True)``: batch-norm layers swapped for torch's ``SyncBatchNorm`` for a multi-process fit
and given back when it ends, holding what the fit trained. The sync itself is torch's and needs GPUs (no GPU here):
these tests check the swap both ways, a single-process fit (nothing to sync: nothing swapped) and the refusal of
CPU processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from stoker import Callback, Trainer
from stoker.trainer.batchnorm_sync import check_device, restore_batchnorm, sync_batchnorm
from tests.helpers.models import Regressor, make_loader, make_regression_data


class Normed(Regressor):
    """The suite's regressor with a BatchNorm1d inside and one more in a nested block."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(),
                                 nn.Sequential(nn.Linear(16, 2), nn.BatchNorm1d(2, affine=False)))


def test_the_swap_keeps_the_tensors_and_the_way_back_gives_the_layers_what_was_trained() -> None:
    module = Normed()
    first, second = module.net[1], module.net[3][1]
    weight, mean = first.weight, first.running_mean
    swapped = sync_batchnorm(module)
    assert set(swapped) == {"net.1", "net.3.1"}
    assert all(isinstance(m, nn.SyncBatchNorm) for m in (module.net[1], module.net[3][1]))
    assert module.net[1].weight is weight and module.net[1].running_mean is mean  # an optimizer needs nothing new
    assert sorted(module.state_dict()) == sorted(Normed().state_dict())  # checkpoints hold the same names
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    x = torch.randn(8, 8)
    module.net(x).pow(2).mean().backward()  # one process, no process group: torch normalizes as BatchNorm does
    optimizer.step()
    trained = {k: v.clone() for k, v in module.state_dict().items()}
    module.eval()
    restore_batchnorm(module, swapped)
    assert module.net[1] is first and module.net[3][1] is second and type(first) is nn.BatchNorm1d
    assert not first.training  # the mode the fit left
    assert all(torch.equal(v, trained[k]) for k, v in module.state_dict().items())
    assert first.num_batches_tracked.item() == 1 and not torch.equal(first.running_mean, torch.zeros(16))


def test_a_single_process_fit_takes_the_flag_and_swaps_nothing(tmp_path: Any) -> None:
    seen: list[type] = []

    class Look(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            seen.append(type(module.net[1]))

    trainer = Trainer(sync_batchnorm=True, max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=[Look()])
    trainer.fit(Normed(), make_loader(make_regression_data(n=16)))
    assert trainer.options.sync_batchnorm and seen == [nn.BatchNorm1d, nn.BatchNorm1d]


def test_cpu_processes_are_refused_with_what_to_do_and_a_bad_value_is_a_type_error() -> None:
    with pytest.raises(ValueError, match="needs them on GPUs.*leave sync_batchnorm off on CPU"):
        check_device(torch.device("cpu"))
    check_device(torch.device("cuda", 0))  # a device object is all it reads: no GPU needed to check the rule
    with pytest.raises(TypeError, match="sync_batchnorm"):
        Trainer(sync_batchnorm="yes")
