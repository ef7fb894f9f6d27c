"""Lightning's own demo modules, trained under pytorch_lightning or, with the demo's source ported (its
``LightningModule`` import renamed to stoker's), under stoker:

- ``lstm``: ``pytorch_lightning.demos.lstm.LightningLSTM``, an LSTM language model that carries its hidden state from
  step to step, resets it in ``on_train_epoch_end`` and reads batches through a custom batch sampler;
- ``transformer``: ``pytorch_lightning.demos.transformer.LightningTransformer``, an encoder-decoder ``nn.Transformer``
  language model (batches of one sequence, as the demo's loader gives).

``python lightning_demo_script.py {lightning|stoker} {lstm|transformer} OUT.pt EPOCHS {dropout|none}``; prints
global_step, the last logged loss (None when the demo logs none) and whether the LSTM's hidden state was reset.
WikiText2 (a download) is replaced by generated token ids of the same shape.
"""

import importlib.util
import json
import os
import sys
import types

import torch
from torch.utils.data import DataLoader, Dataset

FRAMEWORK, DEMO, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
EPOCHS, DROPOUT = int(sys.argv[4]), sys.argv[5] == "dropout"
if FRAMEWORK == "lightning":
    import pytorch_lightning as pl

    demo = importlib.import_module(f"pytorch_lightning.demos.{DEMO}")
else:
    import stoker as pl

    # The demo's file, found without importing pytorch_lightning (seconds of imports the stoker run never uses).
    ORIGIN = os.path.join(importlib.util.find_spec("pytorch_lightning").submodule_search_locations[0], "demos",
                          f"{DEMO}.py")
    with open(ORIGIN) as f:
        source = f.read()
    renames = {"lstm": (("from pytorch_lightning.core import LightningModule", "from stoker import LightningModule"),
                        ("from pytorch_lightning.demos.transformer import WikiText2", "WikiText2 = None")),
               "transformer": (("from pytorch_lightning import LightningModule",
                                "from stoker import LightningModule"),)}
    for old, new in renames[DEMO]:
        assert old in source, old
        source = source.replace(old, new)
    demo = types.ModuleType(f"{DEMO}_demo_on_stoker")
    exec(compile(source, ORIGIN, "exec"), demo.__dict__)  # noqa: S102 - the peer's own demo, ported


class Tokens(Dataset):
    """WikiText2's shape: blocks of 35 token ids, the target shifted by one."""

    def __init__(self, vocab: int = 200, block: int = 35, blocks: int = 60) -> None:
        g = torch.Generator().manual_seed(0)
        self.data, self.block = torch.randint(0, vocab, (block * blocks + 1,), generator=g), block

    def __len__(self) -> int:
        return len(self.data) // self.block - 1

    def __getitem__(self, i: int):
        s = i * self.block
        return self.data[s:s + self.block], self.data[s + 1:s + 1 + self.block]


def local(base: type) -> type:
    class Local(base):
        def prepare_data(self) -> None:  # the demos download WikiText2 here
            pass

        def train_dataloader(self) -> DataLoader:
            if DEMO == "lstm":
                data = Tokens()
                return DataLoader(data, batch_sampler=demo.SequenceSampler(data, batch_size=20))
            return DataLoader(Tokens(blocks=20))  # the demo's loader: one sequence per batch

    return Local


if __name__ == "__main__":
    pl.seed_everything(0)
    model = local(demo.LightningLSTM if DEMO == "lstm" else demo.LightningTransformer)(vocab_size=200)
    if not DROPOUT:
        for layer in model.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.p = 0.0
            if isinstance(layer, (torch.nn.LSTM, torch.nn.MultiheadAttention)):
                layer.dropout = 0.0
    trainer = pl.Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(model)
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, OUT)
    loss = trainer.callback_metrics.get("train_loss")
    print(json.dumps({"global_step": trainer.global_step, "loss": None if loss is None else float(loss),
                      "hidden_reset": getattr(model, "hidden", None) is None}))
