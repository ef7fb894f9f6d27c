"""Child processes of the checkpoint tests: a training run that stops or resumes, and a saver that gets killed.

    python tests/helpers/ckpt_worker.py train DIR --stop-at K   # save_state after K optimizer windows, exit 0
    python tests/helpers/ckpt_worker.py train DIR --resume      # load_state(), run to the end
    python tests/helpers/ckpt_worker.py train DIR               # the uninterrupted run

``train`` writes ``DIR/final.safetensors`` (weights) and ``DIR/log.json`` (per-window losses) when it reaches the
end. ``save_loop`` (run in a forked process by the kill test) saves checkpoints whose every tensor equals the
checkpoint's number, so a loaded checkpoint mixing files of two saves is detected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:  # run as a script: make `stoker` importable
    sys.path.insert(0, str(REPO))

from stoker import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed  # noqa: E402
from stoker.accelerator.checkpointing.weights import write_safetensors  # noqa: E402

EPOCHS, SAMPLES, BATCH = 3, 36, 4  # 9 batches an epoch; accumulation 2 -> windows of 2,2,2,2,1: 5 an epoch


class Progress:
    """A user object saved through register_for_checkpointing: optimizer windows done and losses seen."""

    def __init__(self) -> None:
        self.windows = 0
        self.losses: list[float] = []

    def state_dict(self) -> dict:
        return {"windows": self.windows, "losses": list(self.losses)}

    def load_state_dict(self, state: dict) -> None:
        self.windows, self.losses = state["windows"], list(state["losses"])


def build(project_dir: str, mixed_precision: str = "fp16", workers: int = 0):
    set_seed(0)
    accelerator = Accelerator(
        mixed_precision=mixed_precision, gradient_accumulation_steps=2, cpu=True,
        project_config=ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 6, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(SAMPLES, 1, generator=g))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=workers)
    progress = Progress()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    accelerator.register_for_checkpointing(progress)
    return accelerator, model, optimizer, loader, scheduler, progress


def train(project_dir: str, stop_at: int | None = None, resume: bool = False, mixed_precision: str = "fp16",
          workers: int = 0) -> None:
    accelerator, model, optimizer, loader, scheduler, progress = build(project_dir, mixed_precision, workers)
    if resume:
        accelerator.load_state()
    while loader.epoch < EPOCHS:  # the loader knows its epoch: a resumed run continues where it stopped
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                progress.windows += 1
                progress.losses.append(loss.item())
                if progress.windows == stop_at:
                    print(accelerator.save_state())
                    return
    state = accelerator.unwrap_model(model).state_dict()
    write_safetensors(os.path.join(project_dir, "final.safetensors"), state)
    log = {"windows": progress.windows, "losses": progress.losses, "step": accelerator.step,
           "scale": accelerator.precision.state_dict().get("scaler", {}).get("scale")}
    Path(project_dir, "log.json").write_text(json.dumps(log))


def save_loop(project_dir: str, width: int = 512) -> None:
    """Saves checkpoint after checkpoint (total_limit=3) until killed; each one's tensors all equal its number."""
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=3))
    model = nn.Sequential(nn.Linear(width, width), nn.Linear(width, width))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    fill(model, optimizer, -1.0)
    if os.path.isdir(os.path.join(project_dir, "checkpoints")):
        try:
            accelerator.load_state()
        except FileNotFoundError:
            pass
    while True:
        number = accelerator.save_iteration
        fill(model, optimizer, float(number))
        progress.windows = number
        accelerator.save_state()


def fill(model: nn.Module, optimizer: torch.optim.Optimizer, value: float) -> None:
    """Every parameter and AdamW moment set to ``value`` (creating the moments on first use)."""
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    if not optimizer.state_dict()["state"]:
        optimizer.step()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
            for t in optimizer.state[p].values():
                if t.dim() > 0:
                    t.fill_(value)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train"])
    parser.add_argument("dir")
    parser.add_argument("--stop-at", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--mixed-precision", default="fp16")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    train(args.dir, args.stop_at, args.resume, args.mixed_precision, args.workers)
