"""Tiny, offline stand-ins for what Accelerate's examples download: GLUE MRPC (``datasets.load_dataset``), the
``bert-base-cased`` tokenizer and model (``transformers``), and the GLUE metric (``evaluate.load``).

They keep the call signatures the examples use, so each example's training code runs unchanged on top of them.
The data are sentence pairs whose label says whether both sentences start with the same word; the model is an
embedding bag and a linear layer. Everything is deterministic and runs in milliseconds.

Besides, they record what the runner checks: the batch sizes a model saw (``MODEL_BATCHES``), the number of
samples each metric computation received (``METRIC_COUNTS``), the models made (``MODELS``), and ``OOM_ABOVE``, a batch size above which the model
raises a CUDA-style out-of-memory error (to exercise ``find_executable_batch_size``).
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from stoker.utils import set_seed  # noqa: F401 - the examples import transformers' set_seed; this seeds the same RNGs

VOCAB = 64
WORDS = [f"w{i}" for i in range(20)]
SIZES = {"train": 64, "validation": 40}
OOM_ABOVE: int | None = None
MODEL_BATCHES: list[int] = []
METRIC_COUNTS: list[int] = []
MODELS: list[nn.Module] = []


def _ids(sentence: str) -> list[int]:
    return [sum(map(ord, word)) % (VOCAB - 3) + 3 for word in sentence.split()]


class _Split:
    """A list of rows with the two ``datasets.Dataset`` methods the examples call."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    def map(self, function: Any, batched: bool = True, remove_columns: list[str] | tuple = ()) -> _Split:
        columns = {k: [r[k] for r in self.rows] for k in self.rows[0]}
        added = function(columns)
        keep = [{k: v for k, v in r.items() if k not in remove_columns} for r in self.rows]
        return _Split([{**r, **{k: added[k][i] for k in added}} for i, r in enumerate(keep)])

    def rename_column(self, old: str, new: str) -> _Split:
        return _Split([{(new if k == old else k): v for k, v in r.items()} for r in self.rows])


class _DatasetDict(dict):
    def map(self, function: Any, **kwargs: Any) -> _DatasetDict:
        return _DatasetDict({name: split.map(function, **kwargs) for name, split in self.items()})

    def rename_column(self, old: str, new: str) -> _DatasetDict:
        return _DatasetDict({name: split.rename_column(old, new) for name, split in self.items()})


def load_dataset(path: str, name: str | None = None) -> _DatasetDict:
    """GLUE MRPC's shape (``sentence1``, ``sentence2``, ``label``, ``idx``), generated from a fixed seed."""
    rng = random.Random(0)
    splits = {}
    for split, size in SIZES.items():
        rows = []
        for i in range(size):
            first = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            second = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            label = i % 2
            second[0] = first[0] if label else next(w for w in WORDS if w != first[0])
            rows.append({"sentence1": " ".join(first), "sentence2": " ".join(second), "label": label, "idx": i})
        splits[split] = _Split(rows)
    return _DatasetDict(splits)


class Batch(dict):
    """A dict of tensors with ``.to(device)``, like ``transformers.BatchEncoding``."""

    def to(self, device: Any) -> Batch:
        for key, value in self.items():
            self[key] = value.to(device)
        return self


class _Tokenizer:
    def __call__(self, first: list[str], second: list[str], truncation: bool = True, max_length: Any = None) -> dict:
        ids = [[1, *_ids(a), 2, *_ids(b), 2] for a, b in zip(first, second)]
        return {"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}

    def pad(self, examples: list[dict], padding: str = "longest", max_length: int | None = None,
            pad_to_multiple_of: int | None = None, return_tensors: str = "pt") -> Batch:
        length = max_length or max(len(e["input_ids"]) for e in examples)
        if pad_to_multiple_of:
            length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
        batch = Batch()
        for key in ("input_ids", "attention_mask"):
            batch[key] = torch.tensor([e[key] + [0] * (length - len(e[key])) for e in examples])
        batch["labels"] = torch.tensor([e["labels"] for e in examples])
        return batch


class AutoTokenizer:
    @staticmethod
    def from_pretrained(name: str, **kwargs: Any) -> _Tokenizer:
        return _Tokenizer()


class TinyClassifier(nn.Module):
    """Mean of token embeddings, then a linear layer; ``loss`` and ``logits`` like a sequence classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, 16)
        self.classifier = nn.Linear(16, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None,
                **kwargs: Any) -> SimpleNamespace:
        if self.training:
            MODEL_BATCHES.append(int(input_ids.shape[0]))
            if OOM_ABOVE is not None and input_ids.shape[0] > OOM_ABOVE:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (a stand-in for the real error)")
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embeddings(input_ids) * mask).sum(1) / mask.sum(1).clamp_min(1)
        logits = self.classifier(pooled)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


class AutoModelForSequenceClassification:
    @staticmethod
    def from_pretrained(name: str, **kwargs: Any) -> TinyClassifier:
        MODELS.append(TinyClassifier())
        return MODELS[-1]


class _Metric:
    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: torch.Tensor, references: torch.Tensor) -> None:
        self.predictions += predictions.tolist()
        self.references += references.tolist()

    def compute(self) -> dict[str, float]:
        pairs = list(zip(self.predictions, self.references))
        METRIC_COUNTS.append(len(pairs))
        self.predictions, self.references = [], []
        true_pos = sum(p == r == 1 for p, r in pairs)
        predicted, actual = sum(p for p, _ in pairs), sum(r for _, r in pairs)
        f1 = 2 * true_pos / (predicted + actual) if predicted + actual else 0.0
        return {"accuracy": sum(p == r for p, r in pairs) / max(len(pairs), 1), "f1": f1}


evaluate = SimpleNamespace(load=lambda *args, **kwargs: _Metric())


def get_linear_schedule_with_warmup(optimizer: torch.optim.Optimizer, num_warmup_steps: int,
                                    num_training_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the base rate, then linear decay to 0 (transformers' schedule of the same name)."""

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
