"""Worker for test_manual_ddp.py: the two-optimizer module of test_manual_optimization.py under Trainer(devices=2).

Usage: python manual_ddp_script.py OUT_DIR  -> OUT_DIR/rank{r}.json with global_step, weights and the first batch.
"""

import json
import sys
from pathlib import Path

from stoker import Callback, Trainer
from tests.helpers.models import make_loader, make_regression_data
from tests.trainer.test_manual_optimization import TwoPlayer


class FirstBatch(Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == 0 and not hasattr(self, "batch"):
            self.batch = batch[0].sum().item()


def main() -> None:
    out = Path(sys.argv[1])
    module, first = TwoPlayer(), FirstBatch()
    trainer = Trainer(max_epochs=1, devices=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(out / "run"),
                      callbacks=[first])
    trainer.fit(module, make_loader(make_regression_data(n=64), batch_size=8))
    record = {"global_step": trainer.global_step, "first_batch": first.batch,
              "weights": [p.detach().flatten().tolist() for p in module.parameters()]}
    (out / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
