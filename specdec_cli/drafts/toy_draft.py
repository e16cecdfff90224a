"""The agreement-controlled draft on the toy target (kind `toy`, toy_kind.py), for tests and
demos: the toy target's own greedy token with probability `agree` per position, else a wrong
one, reproducibly from `seed`.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Callable

import torch

from specdec_cli.loop.protocol import Draft


def _coin(seed: int, position: int) -> float:
    """A reproducible uniform [0, 1) draw for (seed, absolute position)."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, position), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class OracleDraft(Draft):
    """Proposes the target's own greedy token with probability `agree` per position, else a
    wrong one, reproducibly from `seed` (the draw depends only on seed and absolute position).

    `oracle(tokens)` returns the target's greedy next token: the toy target computes it
    directly; the synthetic draft reads it from a greedy reference decode of the real target.
    Counts one draft forward per proposed token, as a real autoregressive draft would (so it
    is not `free`), though it runs no model and costs nothing measurable.
    """

    def __init__(self, oracle: Callable[[list[int]], int], vocab: int, agree: float, seed: int,
                 device, name: str):
        self.oracle, self.vocab, self.agree, self.seed = oracle, vocab, agree, seed
        self.device, self.name = device, name
        self.forwards = 0

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        pass

    def right(self, context: list[int]) -> int:
        """The target's greedy token after `context` (a method, so a copy of the draft asks itself)."""
        return self.oracle(context)

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        context, out = list(tokens), []
        for _ in range(k):
            right = self.right(context)
            u = _coin(self.seed, len(context))
            token = right if u < self.agree else (right + 1 + int(u * 1e6) % (self.vocab - 1)) % self.vocab
            out.append(token)
            context.append(token)
        self.forwards += k
        return torch.tensor(out, dtype=torch.long).to(self.device, non_blocking=True)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        pass
