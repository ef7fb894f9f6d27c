"""A Lightning 2.x GAN with manual optimization, written for pytorch_lightning (test_manual_port.py runs it as is
and, after renaming its imports, under stoker).

Usage: python lightning_gan_script.py OUT.pt  -> writes the final weights; prints a JSON line with global_step.
"""

import json
import sys

import pytorch_lightning as pl
import torch
from pytorch_lightning import LightningModule, Trainer
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class GAN(LightningModule):
    def __init__(self, latent: int = 4, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent, 16), nn.ReLU(), nn.Linear(16, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch, batch_idx):
        real, z = batch
        opt_g, opt_d = self.optimizers()
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        fake = self(z).detach()
        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                  + F.binary_cross_entropy_with_logits(self.discriminator(fake), zeros)) / 2
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self):
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []


def main() -> None:
    pl.seed_everything(7)
    data = torch.randn(320, 2) * 0.5 + torch.tensor([2.0, -1.0])
    noise = torch.randn(320, 4)  # drawn up front: the training loop itself uses no random numbers
    loader = DataLoader(TensorDataset(data, noise), batch_size=8)
    model = GAN()
    trainer = Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader)
    torch.save(model.state_dict(), sys.argv[1])
    print(json.dumps({"global_step": trainer.global_step, "epoch": trainer.current_epoch}))


if __name__ == "__main__":
    main()
