"""A tiny deterministic language model for tests and instant demos.

The toy target keeps a rolling hash of the whole context (so the next token depends on every
earlier token and on the length) and turns it into fixed pseudo-random logits over a small
vocabulary. It has the same interface as a real model (`forward` over a KV "cache" that can be
cropped), so the decode loop, cache rollback included, runs unchanged on it in milliseconds.
"""

from __future__ import annotations

import torch

_P = 2_147_483_629  # prime modulus of the rolling hash (< 2**31, so h * A fits in int64)
_M = 1_000_003  # hash multiplier
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 word-like token texts


class ToyCache:
    """Per-position rolling hashes: the toy's stand-in for K/V. `crop(-n)` drops the last n."""

    def __init__(self):
        self.hashes: list[int] = []

    def get_seq_length(self) -> int:
        return len(self.hashes)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0:
            del self.hashes[tokens_to_remove:]


class ToyLM:
    """Deterministic toy causal LM. Token 0 is EOS; logits are a fixed function of the hash."""

    def __init__(self, vocab: int = 64, seed: int = 0, scale: float = 6.0):
        if not 2 <= vocab <= len(_SYLLABLES) + 1:
            raise ValueError(f"toy vocab must be in 2..{len(_SYLLABLES) + 1}, got {vocab}")
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab
        self.seed = seed
        self.scale = scale  # logit range: larger = peakier distribution
        self.a = torch.randint(1, _P, (vocab,), generator=g, dtype=torch.int64)
        self.b = torch.randint(0, _P, (vocab,), generator=g, dtype=torch.int64)
        self.h0 = int(torch.randint(1, _P, (1,), generator=g))
        self.device = torch.device("cpu")
        self.max_positions = None  # no context limit

    def new_cache(self) -> ToyCache:
        return ToyCache()

    def _step(self, h: int, token: int) -> int:
        return (h * _M + token + 1) % _P

    def logits_from_hashes(self, hashes: list[int]) -> torch.Tensor:
        """[S] hashes -> [S, V] float32 logits in [0, scale)."""
        h = torch.tensor(hashes, dtype=torch.int64)[:, None]
        return ((h * self.a + self.b) % _P).float() / _P * self.scale

    def forward(self, ids: torch.Tensor, cache: ToyCache, keep: int = 0) -> torch.Tensor:
        """ids: [1, S] -> logits [S, V] (only the last `keep` rows when keep > 0)."""
        h = cache.hashes[-1] if cache.hashes else self.h0
        for token in ids[0].tolist():
            h = self._step(h, token)
            cache.hashes.append(h)
        rows = cache.hashes[-ids.shape[1]:] if ids.shape[1] else []
        if keep:
            rows = rows[-keep:]
        return self.logits_from_hashes(rows) if rows else torch.empty(0, self.vocab_size)

    def next_logits(self, tokens: list[int]) -> torch.Tensor:
        """[V] logits after `tokens`, computed from scratch (the toy draft's oracle)."""
        h = self.h0
        for token in tokens:
            h = self._step(h, token)
        return self.logits_from_hashes([h])[0]

    def greedy_next(self, tokens: list[int]) -> int:
        return int(self.next_logits(tokens).argmax())


class ToyTokenizer:
    """Words <-> ids. Id 0 is '<eos>'; id i is a syllable; unknown words hash to a stable id."""

    def __init__(self, vocab: int = 64):
        self.vocab_size = vocab
        self.words = ["<eos>"] + _SYLLABLES[: vocab - 1]
        self.index = {w: i for i, w in enumerate(self.words)}
        self.eos_token_id = 0

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word in self.index:
                ids.append(self.index[word])
            else:  # stable across runs (no Python hash randomisation)
                ids.append(1 + sum((i + 1) * ord(c) for i, c in enumerate(word)) % (self.vocab_size - 1))
        return ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids)

    def vocab(self) -> list[str]:
        return list(self.words)
