"""Tiny transformers checkpoints on disk (a word-level tokenizer + a 2-layer Llama), built in
well under a second: local-directory model references without any download."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = ["ba", "be", "bi", "bo", "bu", "da", "de", "di"]


def tiny_checkpoint(path: Path, words: list[str] = WORDS, seed: int = 0) -> Path:
    """config.json, model.safetensors and a tokenizer whose ids are <unk>, <eos>, *words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging

    path.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         eos_token_id=1, bos_token_id=None, pad_token_id=None)
    logging.disable_progress_bar()
    LlamaForCausalLM(config).save_pretrained(path)
    return path
