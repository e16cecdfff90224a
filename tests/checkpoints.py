"""Tiny transformers checkpoints on disk (a word-level tokenizer + a 2-layer Llama), built in
well under a second: local-directory model references without any download."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = ["ba", "be", "bi", "bo", "bu", "da", "de", "di"]
ROOT = Path(__file__).parents[1]
# Shapes for `twins`: config, seed, weight scale. The scale and seed make a greedy text that varies
# (Gemma 3 at 0.3 repeats one token, and then no window could matter).
TWINS = {"llama": (ROOT / "cards" / "configs" / "tiny-llama.json", 1, 0.3),
         "qwen2": (ROOT / "tests" / "data" / "tiny-qwen2.json", 1, 0.3),
         "gemma3": (ROOT / "tests" / "data" / "tiny-gemma3.json", 2, 0.02)}


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


def noisy_pair(shape, seed: int, noise: float):
    """A random float32 model of transformers config `shape` (seeded) and its twin: the same
    weights plus `noise` x each matrix's std (seeded, drawn after the model's)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    target = AutoModelForCausalLM.from_config(shape, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_config(shape, dtype=torch.float32)
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for w in draft.parameters():
            if w.dim() > 1:  # matrices, not the norms' scales
                w.add_(torch.randn_like(w) * noise * w.std())
    return target, draft


def twins(config: Path, seed: int, init: float, noise: float = 0.02):
    """A tiny random transformers model of `config`'s shape (float32, weights ~ N(0, init^2), seeded)
    and its noisy twin: the target's weights plus `noise` x each matrix's std. The twin agrees with
    the target at some positions and not at others, so rounds accept every count from 0 to k.
    `init` large enough that the greedy text varies instead of repeating one token."""
    import json

    from transformers import AutoConfig

    shape = AutoConfig.for_model(**{**json.loads(config.read_text()), "initializer_range": init, "eos_token_id": 1,
                                    "bos_token_id": None, "pad_token_id": None})
    target, draft = noisy_pair(shape, seed, noise)
    for model in (target, draft):
        model.generation_config.eos_token_id = 1
    return target, draft


def twin_checkpoints(folder: Path, config: Path, seed: int, init: float, noise: float = 0.02) -> tuple[Path, Path]:
    """`twins` saved as local checkpoints `target/` and `draft/`, with a word tokenizer whose ids
    are <unk>, <eos>, w2, w3, ... (so "w40 w41" encodes to [40, 41])."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import logging

    target, draft = twins(config, seed, init, noise)
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *(f"w{i}" for i in range(2, target.config.vocab_size))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    logging.disable_progress_bar()
    for name, model in (("target", target), ("draft", draft)):
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(folder / name)
        model.save_pretrained(folder / name)
    return folder / "target", folder / "draft"
