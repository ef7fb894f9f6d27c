"""The tutorial stoker was started from ("Add Accelerate to your code"), section by section, with stoker.

Every Accelerator call the tutorial shows is made here as it shows it, so a reader following the tutorial with
``from stoker import ...`` gets working code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from stoker import Accelerator, DataLoaderConfiguration, ProjectConfiguration, load_checkpoint_in_model
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.weights import params_of


def _objects(n: int = 32, batch_size: int = 8):  # noqa: ANN202 - the tutorial's "already set up" objects
    model = Regressor(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, make_loader(make_regression_data(n=n), batch_size), scheduler


def test_basic_loop_with_device_prepare_and_backward() -> None:
    model, optimizer, training_dataloader, scheduler = _objects()
    loss_function = F.mse_loss
    accelerator = Accelerator(cpu=True)
    device = accelerator.device
    model.to(device)
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    before = params_of(model)
    for batch in training_dataloader:
        optimizer.zero_grad()
        inputs, targets = batch
        outputs = model(inputs)
        loss = loss_function(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
    assert accelerator.step == 4 and scheduler.get_last_lr() == [0.05 * 0.5**2]
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


# The tutorial's scheduler is not prepared, so it steps before the first real optimizer step; torch warns.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_gradient_accumulation_section() -> None:
    model, optimizer, training_dataloader, scheduler = _objects()
    loss_function = F.mse_loss
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer, training_dataloader = accelerator.prepare(model, optimizer, training_dataloader)
    for input, label in training_dataloader:  # noqa: A001 - the tutorial's names
        with accelerator.accumulate(model):
            predictions = model(input)
            loss = loss_function(predictions, label)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()  # not prepared in the tutorial: it steps on every micro-batch
            optimizer.zero_grad()
    assert accelerator.step == 2
    assert scheduler.last_epoch == 4


def test_gradient_clipping_section() -> None:
    model, optimizer, training_dataloader, _ = _objects()
    accelerator = Accelerator(cpu=True)
    model, optimizer, training_dataloader = accelerator.prepare(model, optimizer, training_dataloader)
    x, y = next(iter(training_dataloader))
    accelerator.backward(F.mse_loss(model(x), y))
    accelerator.clip_grad_value_(model.parameters(), 1e-4)
    assert all(p.grad.abs().max() <= 1e-4 for p in model.parameters())
    norm = accelerator.clip_grad_norm_(model.parameters(), 1e-5)
    assert 0 < norm <= 1e-4 * sum(p.numel() for p in model.parameters()) ** 0.5
    assert torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])) <= 1.0001e-5


def test_mixed_precision_section() -> None:
    model, optimizer, training_dataloader, _ = _objects()
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model, optimizer, training_dataloader = accelerator.prepare(model, optimizer, training_dataloader)

    def complex_loss_function(outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (outputs @ outputs.T).mean() * 0 + F.mse_loss(outputs, target)  # has a matmul that autocasts

    for x, target in training_dataloader:
        outputs = model(x)
        with accelerator.autocast():
            loss = complex_loss_function(outputs, target)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    assert torch.isfinite(loss) and accelerator.step >= 1


def test_saving_and_loading_the_model_section(tmp_path: Path) -> None:
    model, optimizer, training_dataloader, _ = _objects()
    accelerator = Accelerator(cpu=True)
    device = accelerator.device
    model, optimizer = accelerator.prepare(model, optimizer)
    save_directory = str(tmp_path / "model")

    accelerator.wait_for_everyone()
    accelerator.save_model(model, save_directory)
    assert os.listdir(save_directory) == ["model.safetensors"]

    # The tutorial then reads "pytorch_model.bin", which is what save_model writes without safetensors.
    accelerator.save_model(model, save_directory, safe_serialization=False)
    unwrapped_model = accelerator.unwrap_model(model)
    path_to_checkpoint = os.path.join(save_directory, "pytorch_model.bin")
    unwrapped_model.load_state_dict(torch.load(path_to_checkpoint))

    accelerator.wait_for_everyone()
    accelerator.save_model(model, save_directory, max_shard_size="1GB", safe_serialization=True)
    fresh = Regressor(seed=5)
    load_checkpoint_in_model(fresh, save_directory, device_map={"": device})
    for p, q in zip(fresh.parameters(), model.parameters()):
        assert torch.equal(p, q)


class _Counter:
    """A stateful object of the user's, registered for checkpointing."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]


def test_saving_and_loading_state_section(tmp_path: Path) -> None:
    model, optimizer, training_dataloader, scheduler = _objects()
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config,
                              dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    counter = _Counter()
    accelerator.register_for_checkpointing(counter)
    batches = iter(training_dataloader)
    for _ in range(2):
        x, y = next(batches)
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        counter.count += 1
    path = accelerator.save_state()
    assert Path(path) == tmp_path / "checkpoints" / "checkpoint_0"
    saved = params_of(model)
    x3, _ = next(batches)  # where the saved run continues

    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    counter.count = 99
    accelerator.load_state()
    assert counter.count == 2
    assert all(torch.equal(p, s) for p, s in zip(model.parameters(), saved))
    assert scheduler.get_last_lr() == [0.05 * 0.5]
    resumed = next(iter(training_dataloader))[0]
    assert torch.equal(resumed, x3)  # the loader continues where the checkpoint was taken
