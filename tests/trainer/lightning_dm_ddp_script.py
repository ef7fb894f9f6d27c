"""Worker for test_lightning_dm_ddp.py: a DataModule under Trainer(devices=2).

Usage: python lightning_dm_ddp_script.py OUT_DIR [per_node|per_job] -> OUT_DIR/rank{r}.json; every prepare_data call
appends a line to OUT_DIR/prepared.txt.
"""

import json
import os
import sys
from pathlib import Path

from stoker import DataModule, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


class Data(DataModule):
    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.stages = []

    def prepare_data(self) -> None:
        with open(os.path.join(self.out, "prepared.txt"), "a") as f:
            f.write(f"{os.environ.get('RANK')}\n")

    def setup(self, stage: str) -> None:
        assert os.path.exists(os.path.join(self.out, "prepared.txt")), "setup ran before prepare_data finished"
        self.stages.append(f"setup:{stage}")
        self.data = make_regression_data(n=64)

    def teardown(self, stage: str) -> None:
        self.stages.append(f"teardown:{stage}")

    def train_dataloader(self):
        return make_loader(self.data, batch_size=8)

    def val_dataloader(self):
        return make_loader(self.data, batch_size=8)


def main() -> None:
    out = Path(sys.argv[1])
    dm = Data(str(out))
    dm.prepare_data_per_node = sys.argv[2] == "per_node"
    trainer = Trainer(max_epochs=1, devices=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(out / "run"))
    trainer.fit(Regressor(), datamodule=dm)
    metrics = trainer.validate(Regressor(), datamodule=dm)
    record = {"global_step": trainer.global_step, "stages": dm.stages, "val": sorted(metrics[0])}
    (out / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
