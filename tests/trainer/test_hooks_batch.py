"""The module's batch-transfer hooks, gradients cleared at a run's start and before a fit's validations, and
evaluation stages limited to zero batches."""

from __future__ import annotations

from typing import Any

import torch

from stoker import Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


def quiet(**kwargs: Any) -> Trainer:
    kwargs.setdefault("max_epochs", 1)
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs)


class Pair:
    """A batch type the Trainer cannot move by itself (no ``.to``)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y


class PairModule(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.seen.append(f"before:{dataloader_idx}:{type(batch).__name__}")
        return Pair(*batch)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.seen.append(f"move:{device.type}")
        return Pair(batch.x.to(device), batch.y.to(device))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.seen.append("after")
        return (batch.x, batch.y * 2)  # what the steps receive


def test_the_transfer_hooks_shape_every_batch_of_every_stage() -> None:
    module = PairModule()
    data = make_regression_data(n=16)
    quiet(num_sanity_val_steps=2).fit(module, make_loader(data), make_loader(data))
    assert module.seen[:3] == ["before:0:list", "move:cpu", "after"]
    assert len(module.seen) == 3 * (2 + 2 + 2)  # two sanity, two training, two validation batches
    module.seen.clear()
    quiet().test(module, make_loader(data))
    assert module.seen == ["before:0:list", "move:cpu", "after"] * 2


def test_the_batch_after_transfer_is_what_the_step_gets() -> None:
    got: list[torch.Tensor] = []

    class Doubling(PairModule):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            got.append(batch[1])

    data = make_regression_data(n=8)
    quiet().test(Doubling(), make_loader(data))
    assert torch.equal(got[0], data.tensors[1] * 2)


def test_without_transfer_hooks_the_loader_places_batches_as_before() -> None:
    got: list[Any] = []

    class Plain(Regressor):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            got.append(batch)

    data = make_regression_data(n=8)
    quiet().test(Plain(), make_loader(data))
    assert isinstance(got[0], list) and torch.equal(got[0][0], data.tensors[0])


def test_each_run_and_each_validation_in_fit_starts_without_gradients() -> None:
    events: list[str] = []

    class Watches(Regressor):
        def on_fit_start(self) -> None:
            self.net[0].weight.grad = torch.ones_like(self.net[0].weight)

        def on_validation_model_zero_grad(self) -> None:
            events.append(f"zero_grad:{self.trainer.sanity_checking}")
            super().on_validation_model_zero_grad()

        def on_validation_start(self) -> None:
            events.append(f"grad is None:{self.net[0].weight.grad is None}")

        def on_train_start(self) -> None:
            events.append(f"train starts, grad is None:{self.net[0].weight.grad is None}")

    data = make_regression_data(n=16)
    quiet(num_sanity_val_steps=2).fit(Watches(), make_loader(data), make_loader(data))
    # the sanity check's validation does not clear; the fit's validation does, through the module's hook
    assert events == ["grad is None:True", "train starts, grad is None:True", "zero_grad:False",
                      "grad is None:True"]


def test_a_validation_inside_an_open_window_keeps_the_gathered_gradients() -> None:
    grads: list[bool] = []

    class Looks(Regressor):
        def on_validation_start(self) -> None:
            if not self.trainer.sanity_checking:
                grads.append(self.net[0].weight.grad is not None)

    data = make_regression_data(n=32)  # 4 batches, windows of 3: the validation after batch 2 is inside one
    quiet(accumulate=3, val_check_interval=2, num_sanity_val_steps=0).fit(Looks(), make_loader(data),
                                                                         make_loader(data))
    assert grads == [True, False]  # inside the open window the gradients stay; at the epoch's end they are cleared


def test_a_stage_limited_to_zero_batches_runs_no_hooks() -> None:
    calls: list[str] = []

    class Counts(Regressor):
        def on_test_start(self) -> None:
            calls.append("on_test_start")

        def on_test_model_eval(self) -> None:
            calls.append("on_test_model_eval")

        def on_predict_start(self) -> None:
            calls.append("on_predict_start")

    data = make_regression_data(n=8)
    assert quiet(limit_test_batches=0).test(Counts(), make_loader(data)) == [{}]
    assert quiet(limit_predict_batches=0).predict(Counts(), make_loader(data.tensors[0])) == []
    assert calls == []


def test_predict_gives_each_sub_module_its_mode_back_without_the_train_hook() -> None:
    called: list[str] = []

    class Frozen(Regressor):
        def on_predict_model_train(self) -> None:
            called.append("on_predict_model_train")
            self.train()

    module = Frozen()
    module.net[0].eval()  # a sub-module kept in eval mode by the user
    quiet().predict(module, make_loader(make_regression_data(n=8).tensors[0]))
    assert called == [] and module.training and not module.net[0].training


def test_the_transfer_hooks_also_shape_batches_of_a_plain_iterable() -> None:
    data = make_regression_data(n=8)
    batches = [[data.tensors[0][:4], data.tensors[1][:4]], [data.tensors[0][4:], data.tensors[1][4:]]]

    class Batches:  # an iterable of batches that is not a DataLoader
        def __iter__(self) -> Any:
            return iter(batches)

    module = PairModule()
    quiet().test(module, Batches())
    assert module.seen == ["before:0:list", "move:cpu", "after"] * 2


def test_a_data_modules_transfer_hooks_run_instead_of_the_modules() -> None:
    import pytest

    from stoker import DataModule

    calls: list[str] = []

    class Data(DataModule):
        def train_dataloader(self) -> Any:
            return make_loader(make_regression_data(n=16))

        def val_dataloader(self) -> Any:
            return make_loader(make_regression_data(n=8, seed=1))

        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            calls.append("data.before")
            x, y = batch
            return [x * 0, y]  # visible to the steps: the inputs are zeros

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            calls.append("data.after")
            return batch

    class Seeing(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            assert torch.count_nonzero(batch[0]) == 0
            return super().training_step(batch, batch_idx)

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            calls.append("module.after")  # the data module defines it too: not called
            return batch

    with pytest.warns(UserWarning, match="Seeing and Data both define on_after_batch_transfer: the data module's runs"):
        quiet(num_sanity_val_steps=0).fit(Seeing(), datamodule=Data())
    assert calls == ["data.before", "data.after"] * 3 and "module.after" not in calls  # 2 train batches, 1 val
    calls.clear()
    quiet().fit(Regressor(), make_loader(make_regression_data(n=16)))  # no data module: nothing of its runs
    assert calls == []


def test_a_data_modules_wrapper_of_a_default_transfer_hook_does_not_take_the_modules_place() -> None:
    import functools

    import pytest

    from stoker import DataModule

    calls: list[str] = []

    class Data(DataModule):
        def train_dataloader(self) -> Any:
            return make_loader(make_regression_data(n=16))

    class Own(Data):
        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            calls.append("data.after")
            return batch

    def wrapped(data: DataModule) -> DataModule:  # what a recorder or profiler does: wrap, then call through
        inner = data.on_after_batch_transfer

        @functools.wraps(inner)
        def hook(*args: Any) -> Any:
            calls.append("wrapper")
            return inner(*args)
        data.on_after_batch_transfer = hook  # type: ignore[method-assign]
        return data

    class Module(Regressor):
        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            calls.append("module.after")
            return batch

    quiet().fit(Module(), datamodule=wrapped(Data()))  # the default, wrapped: the module's hook runs (Lightning)
    assert calls == ["module.after"] * 2
    calls.clear()
    with pytest.warns(UserWarning, match="both define on_after_batch_transfer"):
        quiet().fit(Module(), datamodule=wrapped(Own()))  # an override, wrapped: the data module's
    assert calls == ["wrapper", "data.after"] * 2
