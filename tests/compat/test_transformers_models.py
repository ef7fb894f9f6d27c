"""Hugging Face ``transformers`` models (built from tiny configs, no downloads) trained and saved through stoker.

What users actually run: a causal LM with a token-level summed loss under fp16, ``save_model`` folders read back by
``from_pretrained`` (tied embeddings, shards with Hugging Face's index), and the Trainer driving the same model.
"""

from __future__ import annotations

import pytest
import torch
import transformers  # in the test extra: a missing package fails here, it is never skipped

import stoker

pytestmark = [pytest.mark.compat]

VOCAB = 128


def tiny_llama(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config)


def ragged_batches(n: int, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """Batches of 4 sequences of 24 tokens, each padded after a random length (labels -100 there)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (4, 24), generator=g)
        ids[:, 1::2] = (ids[:, ::2] * 7 + 3) % VOCAB  # a learnable pattern: every odd token follows the even one
        lengths = torch.randint(6, 25, (4,), generator=g)
        labels = ids.clone()
        labels[torch.arange(24)[None, :] >= lengths[:, None]] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


def summed_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    return loss, (labels != -100).sum()


def train(mode: str, steps: int = 8) -> tuple[int, float]:
    """fp16, accumulation 2; ``mode`` "sum" (backward(loss_sum, num_items=n)) or "mean" (the model's own loss)."""
    accelerator = stoker.Accelerator(mixed_precision="fp16", gradient_accumulation_steps=2)
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    skipped = 0
    for batch in ragged_batches(2 * steps):
        with accelerator.accumulate(model):
            if mode == "sum":
                loss, n = summed_loss(model, batch)
                accelerator.backward(loss, num_items=n)
            else:
                accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
            if accelerator.sync_gradients:
                skipped += int(accelerator.optimizer_step_was_skipped)
    model.eval()
    with torch.no_grad():
        total, items = 0.0, 0
        for batch in ragged_batches(4, seed=99):
            loss, n = summed_loss(model, batch)
            total, items = total + float(loss), items + int(n)
    return skipped, total / items


def test_fp16_summed_token_loss_trains_a_llama_as_well_as_the_mean_loss() -> None:
    skipped_sum, eval_sum = train("sum")
    skipped_mean, eval_mean = train("mean")
    assert skipped_sum <= skipped_mean, (skipped_sum, skipped_mean)
    # Both trained 8 windows from the same start; the summed loss must not be left behind by skipped steps.
    assert eval_sum < eval_mean + 0.25, (eval_sum, eval_mean)


@pytest.mark.parametrize("max_shard_size", ["10GB", "30KB"])
def test_save_model_folders_load_with_from_pretrained(tmp_path, max_shard_size: str) -> None:
    accelerator = stoker.Accelerator()
    model = accelerator.prepare(tiny_llama(seed=3))
    folder = tmp_path / "llama"
    accelerator.save_model(model, folder, max_shard_size=max_shard_size)
    accelerator.unwrap_model(model).config.save_pretrained(folder)
    if max_shard_size == "30KB":
        assert (folder / "model.safetensors.index.json").exists()
    loaded = transformers.LlamaForCausalLM.from_pretrained(folder)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # still tied
    want = accelerator.unwrap_model(model).state_dict()
    for name, tensor in loaded.state_dict().items():
        torch.testing.assert_close(tensor, want[name], rtol=0, atol=0)


class LlamaModule(stoker.TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = tiny_llama()

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        loss, n = summed_loss(self.model, batch)
        return {"loss": loss, "num_items": n}

    def configure_optimizers(self):  # noqa: ANN201
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def test_trainer_fits_a_llama_with_per_token_normalisation_like_a_raw_loop(tmp_path) -> None:
    batches = ragged_batches(8)
    module = LlamaModule()
    reference = tiny_llama()
    optimizer = torch.optim.AdamW(reference.parameters(), lr=3e-3)
    for start in range(0, 8, 2):  # windows of 2 micro-batches, normalised by the window's token count
        window = batches[start:start + 2]
        total = sum(int((b["labels"][:, 1:] != -100).sum()) for b in window)
        for batch in window:
            (summed_loss(reference, batch)[0] / total).backward()
        optimizer.step()
        optimizer.zero_grad()
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    trainer = stoker.Trainer(max_epochs=1, accumulate=2, default_root_dir=str(tmp_path), logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    assert trainer.global_step == 4
    for got, want in zip(module.model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
