"""Your own training loop on any device and precision: the Accelerate quick tour, with ``stoker.Accelerator``.

A small regression MLP on generated data, with gradient accumulation, gradient clipping, mixed precision chosen on
the command line, and a custom loss computed under ``accelerator.autocast()``. Porting a script written for Hugging
Face Accelerate means changing one import: ``from accelerate import Accelerator`` -> ``from stoker import
Accelerator``.

Run:
    python examples/accelerator_loop.py                          # full precision
    python examples/accelerator_loop.py --mixed-precision fp16   # float16 autocast + loss scaling (CPU or GPU)
    python examples/accelerator_loop.py --samples 256 --epochs 1 # a tiny, fast run
    stoker launch --num_processes 2 --cpu examples/accelerator_loop.py   # two processes (gloo on the CPU)
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, set_seed


def make_data(samples: int, features: int) -> TensorDataset:
    """Targets from a fixed random two-layer network, so there is something nonlinear to learn."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=g)
    w1, w2 = torch.randn(features, 32, generator=g), torch.randn(32, 1, generator=g)
    y = torch.tanh(x @ w1) @ w2 / 4
    return TensorDataset(x, y)


def smooth_l1_loss(prediction: torch.Tensor, target: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """A "complex" loss written by hand, as in the quick tour's ``complex_loss_function``."""
    diff = (prediction - target).abs()
    return torch.where(diff < beta, 0.5 * diff**2 / beta, diff - 0.5 * beta).mean()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # None: the Accelerator takes the launcher's choice (`stoker launch --mixed_precision bf16`), else "no".
    parser.add_argument("--mixed-precision", default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--gradient-accumulation-steps", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is present")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    set_seed(args.seed)
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        cpu=args.cpu,
    )
    device = accelerator.device  # where the Accelerator puts models and batches
    accelerator.print(f"device={device} mixed_precision={accelerator.mixed_precision} "
                      f"gradient_accumulation_steps={accelerator.gradient_accumulation_steps}")

    features = 16
    model = nn.Sequential(nn.Linear(features, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    training_dataloader = DataLoader(make_data(args.samples, features), batch_size=args.batch_size, shuffle=True)
    steps_per_epoch = -(-len(training_dataloader) // args.gradient_accumulation_steps)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr,
                                                    total_steps=steps_per_epoch * args.epochs)

    # One call prepares everything: the model moves to `device` (its forward runs under autocast), the optimizer
    # and scheduler step only when a window of micro-batches is complete, and batches arrive on `device`.
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )

    epoch_loss = float("nan")
    for epoch in range(args.epochs):
        model.train()
        total = torch.zeros((), device=device)  # summed on the device: no host sync per step
        for inputs, targets in training_dataloader:  # no .to(device): the prepared loader did it
            with accelerator.accumulate(model):
                outputs = model(inputs)
                with accelerator.autocast():
                    loss = smooth_l1_loss(outputs, targets)
                accelerator.backward(loss)  # scales for fp16 and divides by the window length
                if accelerator.sync_gradients:  # clip only complete (and unscaled) gradients
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()  # no-ops until the window's last micro-batch
                scheduler.step()
                optimizer.zero_grad()
            total += loss.detach()
        epoch_loss = (total / len(training_dataloader)).item()
        accelerator.print(f"epoch {epoch}: loss {epoch_loss:.4f} (optimizer steps so far: {accelerator.step})")

    accelerator.wait_for_everyone()
    accelerator.print(f"final loss {epoch_loss:.4f}")
    return epoch_loss


if __name__ == "__main__":
    main()
