"""Your own callback with state that survives a crash: an exponential moving average (EMA) of the weights.

``EMA`` keeps a shadow copy of the weights, updated after every optimizer step. Its ``state_dict`` goes into
every checkpoint the Trainer writes (under its ``state_key``) and comes back through ``load_state_dict`` on
resume. The script trains three times on generated data:

1. uninterrupted, as the reference;
2. with a simulated crash after step ``--crash-at`` (a ``ModelCheckpoint`` saves every few steps);
3. resumed with ``fit(ckpt_path="last")`` -- and checks that the model *and* the EMA match run 1 exactly.

Run:
    python examples/custom_callback.py                      # writes under ./custom_callback_runs (emptied first)
    python examples/custom_callback.py --root /tmp/ema --epochs 3 --crash-at 7
"""

from __future__ import annotations

import argparse
import os
import shutil

import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Callback, ModelCheckpoint, Trainer, TrainingModule


class EMA(Callback):
    """An exponential moving average of the module's parameters, checkpointed and restored with the run.

    Example:
        >>> ema = EMA(decay=0.9)
        >>> Trainer(callbacks=[ema]).fit(module, loader)  # doctest: +SKIP
        >>> ema.copy_to(module)                          # evaluate with the averaged weights
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.shadow: dict[str, torch.Tensor] = {}
        self.updates = 0
        self._seen_step = -1

    def on_fit_start(self, trainer, module) -> None:
        params = dict(module.named_parameters())
        if not self.shadow:  # a fresh run starts from the initial weights; a resumed one was loaded already
            self.shadow = {name: p.detach().clone() for name, p in params.items()}
        else:
            self.shadow = {name: t.to(params[name].device) for name, t in self.shadow.items()}
        self._seen_step = trainer.global_step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._seen_step:  # no optimizer step on this micro-batch (accumulation)
            return
        self._seen_step = trainer.global_step
        with torch.no_grad():
            for name, p in module.named_parameters():
                self.shadow[name].lerp_(p.detach(), 1 - self.decay)
        self.updates += 1

    def state_dict(self) -> dict:
        # Tensors, numbers, strings, lists and dicts only: checkpoints never pickle.
        return {"decay": self.decay, "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        self.decay, self.updates = float(state["decay"]), int(state["updates"])
        self.shadow = {name: t.clone() for name, t in state["shadow"].items()}

    def copy_to(self, module: torch.nn.Module) -> None:
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.copy_(self.shadow[name])


class CrashAt(Callback):
    """Stands in for a power cut: raises after optimizer step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash after step {self.step}")


class Regressor(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def make_loader(samples: int = 256) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)  # shuffled: resume must get the order right


def run(root: str, epochs: int, callbacks: list, ckpt_path: str | None = None) -> tuple[Regressor, EMA]:
    ema = EMA()
    module = Regressor()
    # Order matters on each batch end: the EMA updates first, so a checkpoint taken then already includes it.
    trainer = Trainer(max_epochs=epochs, default_root_dir=root, seed=0, logger=False, enable_progress_bar=False,
                      callbacks=[ema, ModelCheckpoint(every_n_train_steps=3, save_last=True), *callbacks])
    trainer.fit(module, make_loader(), ckpt_path=ckpt_path)
    return module, ema


def main() -> None:
    parser = argparse.ArgumentParser(description="An EMA callback whose state survives a crash and a resume.")
    parser.add_argument("--root", default="custom_callback_runs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--crash-at", type=int, default=13, help="optimizer step after which run 2 crashes")
    args = parser.parse_args()

    # Both runs start from empty folders: checkpoints left by an earlier run of this script would sit beside the
    # new ones (ModelCheckpoint warns), and the comparison below is about this run's crash and resume.
    for name in ("reference", "interrupted"):
        shutil.rmtree(os.path.join(args.root, name), ignore_errors=True)
    reference, reference_ema = run(os.path.join(args.root, "reference"), args.epochs, [])
    interrupted = os.path.join(args.root, "interrupted")
    try:
        run(interrupted, args.epochs, [CrashAt(args.crash_at)])
    except RuntimeError as error:
        print(f"run 2: {error}")
    module, ema = run(interrupted, args.epochs, [], ckpt_path="last")
    print(f"run 3: resumed and finished; EMA updates: {ema.updates} (reference: {reference_ema.updates})")

    same_model = all(torch.equal(a, b) for a, b in zip(module.parameters(), reference.parameters()))
    same_ema = all(torch.equal(ema.shadow[n], reference_ema.shadow[n]) for n in reference_ema.shadow)
    print(f"model identical to the uninterrupted run: {same_model}")
    print(f"EMA identical to the uninterrupted run: {same_ema}")
    x, y = make_loader().dataset.tensors
    device = next(module.parameters()).device  # the Trainer's device (a GPU when there is one)
    x, y = x.to(device), y.to(device)
    with torch.no_grad():
        raw = torch.nn.functional.mse_loss(module.net(x), y).item()
        ema.copy_to(module)
        averaged = torch.nn.functional.mse_loss(module.net(x), y).item()
    print(f"training loss with the raw weights {raw:.4f}, with the EMA weights {averaged:.4f}")
    if not (same_model and same_ema):
        raise SystemExit("resume was not exact")


if __name__ == "__main__":
    main()
