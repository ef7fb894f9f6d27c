"""Stop a training run, resume it exactly, then export and reload its weights: Accelerate's checkpointing flow.

``save_state``/``load_state`` with ``ProjectConfiguration(automatic_checkpoint_naming=True)`` write and find
``{project_dir}/checkpoints/checkpoint_{n}``; ``use_stateful_dataloader=True`` makes the shuffled loader resume at
the next batch; a user object joins the checkpoint through ``register_for_checkpointing``. At the end the model is
exported with ``save_model`` (safetensors shards + index) and loaded back with ``load_checkpoint_in_model``.

Run:
    python examples/accelerator_resume.py --project-dir runs/resume --stop-at-step 9   # stops after 9 steps
    python examples/accelerator_resume.py --project-dir runs/resume                    # resumes and finishes
    python examples/accelerator_resume.py --project-dir runs/full                      # the same, uninterrupted
Both finished runs print the same weights digest.
"""

from __future__ import annotations

import argparse
import hashlib
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from stoker import (Accelerator, DataLoaderConfiguration, ProjectConfiguration, load_checkpoint_in_model,
                    set_seed)


class LossTracker:
    """A user object saved with the checkpoint: anything with state_dict()/load_state_dict() of plain data."""

    def __init__(self) -> None:
        self.history: list[float] = []

    def state_dict(self) -> dict:
        return {"history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.history = list(state["history"])


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 1))


def make_data(samples: int = 512) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 16, generator=g)
    return TensorDataset(x, torch.sin(x[:, :1] * 2) + 0.1 * x[:, 1:2])


def digest(model: nn.Module) -> str:
    """A short fingerprint of every parameter's exact bits."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project-dir", default="runs/resume")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--stop-at-step", type=int, default=None, help="save and exit after this optimizer step")
    parser.add_argument("--save-every", type=int, default=4, help="optimizer steps between checkpoints")
    parser.add_argument("--max-shard-size", default="2KB", help="tiny, to show sharding on a small model")
    parser.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args(argv)

    set_seed(0)
    config = ProjectConfiguration(project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(
        project_config=config, mixed_precision=args.mixed_precision, gradient_accumulation_steps=2, cpu=args.cpu,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # loader positions are saved
    )
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(make_data(), batch_size=32, shuffle=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    tracker = LossTracker()
    accelerator.register_for_checkpointing(tracker)

    try:  # the newest *complete* checkpoint; a save interrupted by a crash is never picked
        accelerator.load_state()
        accelerator.print(f"resumed at step {accelerator.step}, epoch {loader.epoch}; "
                          f"next checkpoint: checkpoint_{accelerator.save_iteration}")
    except FileNotFoundError:
        accelerator.print("no checkpoint yet: starting fresh")

    while loader.epoch < args.epochs:  # a resumed loader continues inside its epoch
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if not accelerator.sync_gradients:
                continue
            tracker.history.append(loss.item())
            if accelerator.step == args.stop_at_step:
                path = accelerator.save_state()
                accelerator.print(f"stopping at step {accelerator.step}: saved {path}")
                return "stopped"
            if accelerator.step % args.save_every == 0:
                accelerator.save_state()
        accelerator.print(f"epoch {loader.epoch - 1}: last loss {tracker.history[-1]:.4f}")

    # Export the weights (Hugging Face layout), then load them into a fresh model as another script would.
    export = os.path.join(args.project_dir, "export")
    accelerator.wait_for_everyone()
    accelerator.save_model(model, export, max_shard_size=args.max_shard_size, safe_serialization=True)
    accelerator.print(f"exported: {sorted(os.listdir(export))}")
    unwrapped = accelerator.unwrap_model(model)
    fresh = make_model()
    load_checkpoint_in_model(fresh, export, strict=True)
    assert digest(fresh) == digest(unwrapped), "the export does not hold the trained weights"
    load_checkpoint_in_model(unwrapped, export)  # the tutorial's pattern: load into the unwrapped model
    accelerator.print(f"steps: {accelerator.step}, losses recorded: {len(tracker.history)}")
    accelerator.print(f"weights digest: {digest(unwrapped)}")
    return digest(unwrapped)


if __name__ == "__main__":
    main()
