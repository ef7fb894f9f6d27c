"""A character-level transformer trained on the source code of Python's own standard library.

    python examples/char_lm.py           # under a minute on 2 CPU cores; prints a sample and the time taken
    python examples/char_lm.py --full    # longer: more text, a wider model, more steps (--tiny: seconds; --resume)

Shows: accumulate=2, bf16 where the hardware has it (`--precision auto`: fp32 on a CPU, where bf16 autocast without
bf16 instructions is several times slower), a per-step warm-up/cosine schedule, validation perplexity through a
torchmetrics Metric, TensorBoard logs and checkpoints ({root}/stoker_logs/version_N and its checkpoints/).
"""

from __future__ import annotations

import time

_START = time.perf_counter()  # before torch is imported: the printed time includes start-up

import argparse
import importlib
import inspect
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from stoker import ModelCheckpoint, Trainer, TrainingModule, set_seed

MODULES = ["textwrap", "string", "heapq", "bisect", "fractions", "functools", "json.decoder", "json.encoder",
           "argparse", "dataclasses", "collections", "inspect", "pathlib", "shutil", "tokenize", "difflib"]


def stdlib_text(max_chars: int) -> str:
    """Source code of a few standard-library modules (found through ``inspect``, so nothing is downloaded)."""
    parts = [inspect.getsource(importlib.import_module(name)) for name in MODULES]
    return "\n".join(parts)[:max_chars]


class Chars(Dataset):
    """Windows of ``block + 1`` characters, ``stride`` apart: input = the first ``block``, target = shifted by one."""

    def __init__(self, ids: torch.Tensor, block: int, stride: int) -> None:
        self.ids, self.block, self.stride = ids, block, stride

    def __len__(self) -> int:
        return (len(self.ids) - self.block - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[i * self.stride: i * self.stride + self.block + 1]
        return chunk[:-1], chunk[1:]


class CharLM(TrainingModule):
    def __init__(self, vocab: str, block: int = 64, width: int = 128, layers: int = 2, heads: int = 4,
                 lr: float = 3e-3, dropout: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.tokens, self.positions = nn.Embedding(len(vocab), width), nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, len(vocab))
        from torchmetrics.text import Perplexity

        self.val_ppl = Perplexity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x).flatten(0, 1), y.flatten())
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val/loss", F.cross_entropy(logits.flatten(0, 1), y.flatten()))
        self.val_ppl.update(logits.float(), y)
        self.log("val/ppl", self.val_ppl, prog_bar=True)

    def configure_optimizers(self) -> dict:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = max(1, min(20, total // 10))

        def schedule(step: int) -> float:  # linear warm-up, then cosine to 10%
            cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(total - warmup, 1))))
            return (step + 1) / warmup if step < warmup else cosine

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    @torch.no_grad()
    def generate(self, prompt: str, length: int, temperature: float = 0.8) -> str:
        vocab, block = self.hparams.vocab, self.hparams.block
        ids = torch.tensor([[vocab.index(c) for c in prompt if c in vocab]], device=self.device)
        for _ in range(length):
            logits = self(ids[:, -block:])[:, -1].float() / temperature
            ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1)], dim=1)
        return "".join(vocab[i] for i in ids[0].tolist())


# (max_steps, chars, batch_size, width, lr, dropout, batches between validations, val batches); quick: ~45 s CPU.
SIZES = {"quick": (400, 150_000, 16, 96, 5e-3, 0.0, 400, 8), "full": (500, 400_000, 16, 128, 3e-3, 0.1, 100, 20),
         "tiny": (6, 20_000, 8, 32, 3e-3, 0.1, 100, 20)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="runs/char_lm", help="checkpoints and TensorBoard logs go here")
    parser.add_argument("--full", action="store_true", help="the longer run (a few minutes on 2 CPU cores)")
    parser.add_argument("--tiny", action="store_true", help="a seconds-long run: small model, few steps")
    parser.add_argument("--max-steps", type=int, default=None, help="optimizer steps (2 micro-batches each)")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --root")
    args = parser.parse_args(argv)
    max_steps, chars, batch_size, width, lr, dropout, val_every, val_batches = SIZES[
        "tiny" if args.tiny else "full" if args.full else "quick"]
    max_steps = args.max_steps or max_steps
    bf16 = args.tiny or (torch.cuda.is_available() and torch.cuda.is_bf16_supported())  # tiny: to exercise bf16
    precision = args.precision if args.precision != "auto" else "bf16" if bf16 else "fp32"

    set_seed(0)  # the model's initial weights too (Trainer(seed=...) seeds at fit, after the model exists)
    text = stdlib_text(chars)
    vocab = "".join(sorted(set(text)))
    ids = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)
    block, split = 64, int(0.9 * len(ids))
    train = DataLoader(Chars(ids[:split], block, stride=block // 2), batch_size=batch_size, shuffle=True)
    val = DataLoader(Chars(ids[split:], block, stride=block), batch_size=64)

    module = CharLM(vocab, block=block, width=width, layers=2, heads=4, lr=lr, dropout=dropout)
    trainer = Trainer(max_steps=max_steps, accumulate=2, precision=precision, default_root_dir=args.root,
                      # every `val_every` batches, as a fraction of the epoch: right also when torchrun splits it
                      val_check_interval=min(1.0, val_every / len(train)), limit_val_batches=val_batches,
                      log_every_n_steps=10, clip_grad_norm=1.0, seed=0,
                      callbacks=[ModelCheckpoint(save_last=True)])  # last.ckpt: the newest state, printed below
    trainer.fit(module, train, val, ckpt_path="last" if args.resume else None)

    ppl = trainer.validate(module, val)[0]["val/ppl"]
    print(f"\n{len(text):,} characters, vocabulary {len(vocab)}; {trainer.global_step} optimizer steps "
          f"({precision}); validation perplexity {ppl:.2f} (uniform guessing: {len(vocab)})")
    print(f"checkpoint: {trainer.checkpoint_callback.last_model_path}\nTensorBoard: tensorboard --logdir "
          f"{trainer.log_dir}\n--- sample ---")
    print(module.generate("def ", 300 if not args.tiny else 40))
    cpu = sum(os.times()[:4])  # user + system time: less sensitive than wall time to a loaded machine
    print(f"--- finished in {time.perf_counter() - _START:.1f} s ({cpu:.1f} s CPU, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
