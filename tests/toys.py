"""Test doubles around the toy model: a cache-free reference decode, a draft model that
disagrees with the target at reproducible places, and a target that records its cache."""

from __future__ import annotations

import torch

from specdec_cli.engine.toy_model import _P, ToyLM


def reference(target: ToyLM, prompt: list[int], n: int, eos: frozenset[int] = frozenset()) -> list[int]:
    """The target's greedy continuation with no cache and no rollback: the rolling hash carried
    by hand, one argmax per position. Stops after EOS (inclusive) or at n tokens."""
    h = target.h0
    for token in prompt:
        h = target._step(h, token)
    out = []
    while len(out) < n and not (out and out[-1] in eos):
        out.append(int(target.logits_from_hashes([h])[0].argmax()))
        h = target._step(h, out[-1])
    return out


class NoisyToyLM(ToyLM):
    """The target's own logits, except at a reproducible `noise` fraction of contexts (chosen by
    the context's hash) where another token wins. As a ModelDraft it agrees with the target
    about 1 - noise of the time and rolls its own KV cache back like a real draft model."""

    def __init__(self, target: ToyLM, noise: float, salt: int = 1):
        super().__init__(target.vocab_size, target.seed, target.scale)
        self.noise, self.salt = noise, salt

    def logits_from_hashes(self, hashes: list[int]) -> torch.Tensor:
        logits = super().logits_from_hashes(hashes)  # [S, V]
        for row, h in enumerate(hashes):
            u = ((h * 2654435761 + self.salt) % _P) / _P
            if u < self.noise and self.vocab_size > 1:
                wrong = (int(logits[row].argmax()) + 1 + h % (self.vocab_size - 1)) % self.vocab_size
                logits[row, wrong] = self.scale + 1  # above every real logit
        return logits


class CacheWatch:
    """Wraps a target and records (cache length before, positions fed) for every forward."""

    def __init__(self, lm):
        self.lm, self.calls = lm, []
        self.device, self.vocab_size, self.max_positions = lm.device, lm.vocab_size, lm.max_positions

    def new_cache(self):
        return self.lm.new_cache()

    def forward(self, ids, cache, keep: int = 0):
        self.calls.append((cache.get_seq_length(), ids.shape[1]))
        return self.lm.forward(ids, cache, keep)
