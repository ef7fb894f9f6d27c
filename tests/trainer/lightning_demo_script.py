"""Lightning's own demo module ``pytorch_lightning.demos.lstm.LightningLSTM`` (an LSTM language model that carries
its hidden state from step to step, resets it in ``on_train_epoch_end``, and reads batches through a custom batch
sampler), trained under pytorch_lightning or, with the demo's source ported (its ``LightningModule`` import renamed
to stoker's), under stoker.

``python lightning_demo_script.py {lightning|stoker} OUT.pt EPOCHS DROPOUT``; prints global_step, the last loss and
whether the hidden state was reset. WikiText2 (a download) is replaced by generated token ids of the same shape.
"""

import importlib.util
import json
import sys
import types

import torch
from torch.utils.data import DataLoader, Dataset

FRAMEWORK, OUT, EPOCHS, DROPOUT = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "dropout"
SPEC = importlib.util.find_spec("pytorch_lightning.demos.lstm")
if FRAMEWORK == "lightning":
    import pytorch_lightning as pl
    from pytorch_lightning.demos.lstm import LightningLSTM, SequenceSampler
else:
    import stoker as pl

    with open(SPEC.origin) as f:
        source = f.read()
    for old, new in (("from pytorch_lightning.core import LightningModule", "from stoker import LightningModule"),
                     ("from pytorch_lightning.demos.transformer import WikiText2", "WikiText2 = None")):
        assert old in source, old
        source = source.replace(old, new)
    demo = types.ModuleType("lstm_demo_on_stoker")
    exec(compile(source, SPEC.origin, "exec"), demo.__dict__)  # noqa: S102 - the peer's own demo, ported
    LightningLSTM, SequenceSampler = demo.LightningLSTM, demo.SequenceSampler


class Tokens(Dataset):
    """WikiText2's shape: blocks of 35 token ids, the target shifted by one."""

    def __init__(self, vocab: int = 200, block: int = 35, blocks: int = 200) -> None:
        g = torch.Generator().manual_seed(0)
        self.data, self.block = torch.randint(0, vocab, (block * blocks + 1,), generator=g), block

    def __len__(self) -> int:
        return len(self.data) // self.block - 1

    def __getitem__(self, i: int):
        s = i * self.block
        return self.data[s:s + self.block], self.data[s + 1:s + 1 + self.block]


class Local(LightningLSTM):
    def prepare_data(self) -> None:  # the demo downloads WikiText2 here
        pass

    def train_dataloader(self) -> DataLoader:
        data = Tokens()
        return DataLoader(data, batch_sampler=SequenceSampler(data, batch_size=20))


if __name__ == "__main__":
    pl.seed_everything(0)
    model = Local(vocab_size=200)
    if not DROPOUT:
        model.model.rnn.dropout, model.model.drop.p = 0.0, 0.0
    trainer = pl.Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(model)
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, OUT)
    print(json.dumps({"global_step": trainer.global_step, "loss": float(trainer.callback_metrics["train_loss"]),
                      "hidden_reset": model.hidden is None}))
