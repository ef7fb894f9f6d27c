"""Attributes a script reads off Accelerate's ``Accelerator`` (and Lightning's ``Trainer.scaler``): the loss scaler of
an fp16 run and the loader settings, read from the objects that own them."""

from __future__ import annotations

import torch

from stoker import Accelerator, DataLoaderConfiguration, Trainer


def test_the_scaler_is_the_fp16_runs_and_none_otherwise() -> None:
    fp16 = Accelerator(mixed_precision="fp16", cpu=True)
    assert isinstance(fp16.scaler, torch.amp.GradScaler) and fp16.scaler is fp16.precision.scaler
    assert Accelerator(cpu=True).scaler is None and Accelerator(mixed_precision="bf16", cpu=True).scaler is None
    assert isinstance(Trainer(precision="16-mixed", logger=False).scaler, torch.amp.GradScaler)
    assert Trainer(logger=False).scaler is None


def test_the_loader_settings_read_the_dataloader_configuration() -> None:
    config = DataLoaderConfiguration(use_stateful_dataloader=True, use_seedable_sampler=False, non_blocking=True)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    assert (accelerator.use_stateful_dataloader, accelerator.use_seedable_sampler, accelerator.non_blocking) == \
        (True, False, True)
