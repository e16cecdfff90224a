"""Prompts the target writes itself, for `specdec distill --self-prompts N` (Magpie, Xu et al. 2024).

An instruct model fed only its chat template's opening of a user turn continues it with a
request of its own: sampled, these read like what users ask it, on far more subjects and in
more styles than the templated prompts (trainprompts.py), and they cost a few milliseconds
each. A request is kept when the model ended its turn (an end-of-turn token within the
length), it is at least a few tokens long and it is new. Sampling is seeded, and the requests
are cached in the user cache, so a rerun with the same seed trains on the same prompts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

import torch

from specdec_cli.cards.prompts import Prompt
from specdec_cli.engine.tokenizers import HFTokenizer
from specdec_cli.errors import SpecdecError
from specdec_cli.files import cache_dir, write_text_atomic

FORMAT = "self-prompts/1"  # part of the cache key: a new rule never reads an old file
MARKER = "\u2063specdec-request\u2063"  # stands for a user message's content in the template
SHORTEST = 4  # tokens: shorter turns are greetings or fragments, not requests


def opening(tokenizer) -> list[int]:
    """The ids the chat template puts before a user message's content (system turn included)."""
    if not (isinstance(tokenizer, HFTokenizer) and tokenizer.has_chat_template()):
        raise SpecdecError("command line: --self-prompts: the target's tokenizer has no chat template to open a "
                           "user turn with")
    text = tokenizer.tok.apply_chat_template([{"role": "user", "content": MARKER}], tokenize=False)
    if MARKER not in text:
        raise SpecdecError("command line: --self-prompts: the target's chat template drops the user's message")
    return list(tokenizer.tok(text[:text.index(MARKER)], add_special_tokens=False)["input_ids"])


def self_prompts(pair, n: int, seed: int, batch: int = 64, max_new_tokens: int = 64,
                 report: Callable[[int, int], None] = lambda done, total: None) -> list[Prompt]:
    """`n` requests the target wrote (category "self"), from the cache or sampled (temperature 1,
    top-p 0.95) in batches of `batch`; `report(kept, n)` after each batch."""
    start = opening(pair.tokenizer)
    key = [FORMAT, pair.tokenizer.tok.name_or_path, str(pair.target.model.dtype), start, n, seed, batch, max_new_tokens,
           sorted(pair.eos)]
    path = cache_dir("distill") / f"self-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]}.json"
    try:
        texts = json.loads(path.read_text())
    except (OSError, ValueError):
        texts = _write(pair, start, n, seed, batch, max_new_tokens, report)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(texts, ensure_ascii=False), "distill cache")
        except (OSError, SpecdecError):
            pass  # the cache is an optimisation only
    report(len(texts), n)
    return [Prompt(f"self-{i}", text, "self") for i, text in enumerate(texts)]


@torch.no_grad()
def _write(pair, start: list[int], n: int, seed: int, batch: int, max_new_tokens: int,
           report: Callable[[int, int], None]) -> list[str]:
    texts, seen, tries = [], set(), 0
    ids = torch.tensor([start] * batch, device=pair.device)
    eos = sorted(pair.eos)
    if not eos:
        raise SpecdecError("command line: --self-prompts: the target has no end-of-turn token to end a request with")
    while len(texts) < n:
        if tries == 4 * (n // batch + 1):
            raise SpecdecError(f"command line: --self-prompts: the target wrote only {len(texts)} usable requests "
                               f"of {n} in {tries} batches of {batch}")
        with torch.random.fork_rng(devices=[pair.device] if pair.device.type == "cuda" else []):
            torch.manual_seed(seed * 1_000_003 + tries)
            out = pair.target.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                             temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=max_new_tokens,
                                             eos_token_id=eos, pad_token_id=eos[0])
        tries += 1
        for row in out[:, len(start):].tolist():
            end = next((i for i, t in enumerate(row) if t in pair.eos), None)
            text = pair.tokenizer.decode(row[:end]).strip() if end is not None else ""
            if end is not None and end >= SHORTEST and text and text not in seen and len(texts) < n:
                seen.add(text)
                texts.append(text)
        report(len(texts), n)
    return texts
