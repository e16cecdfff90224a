"""Drafts: everything that proposes tokens for the target to verify.

One protocol (after transformers' candidate generators):
    begin(prompt)              start a new request (drop all per-request state)
    propose(tokens, k) -> [d]  up to k token ids continuing `tokens`, on the target's device
    update(tokens, accepted)   the round is over: `tokens` is the new sequence and the first
                               `accepted` proposed tokens were kept
    forwards                   model calls made so far (a counter, never reset by begin)
Optional, for sampling (temperature > 0):
    propose_sampled(tokens, k, warp, generator) -> ([d], q [d, V] or None)
                               tokens drawn from the draft's warped distribution q, and q for
                               each; a draft without it proposes deterministically (one-hot q)
A model draft, an early-exit view of the target, prompt lookup and the agreement-controlled
oracle drafts (toy, synthetic) are all just implementations.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Callable, Protocol

import numpy as np
import torch

from .errors import SpecdecError


class Draft(Protocol):
    name: str
    forwards: int

    def begin(self, prompt: list[int]) -> None: ...
    def propose(self, tokens: list[int], k: int) -> torch.Tensor: ...
    def update(self, tokens: list[int], accepted: int) -> None: ...


class ModelDraft:
    """A causal LM that proposes its own greedy tokens, with its own KV cache.

    Cache invariant: `self.cached` positions of `tokens` are in the draft cache. A proposal of
    k feeds the uncached tail of `tokens`, then k-1 of its own tokens (the k-th is never fed).
    """

    def __init__(self, lm, shared_vocab: int, name: str = "model"):
        self.lm, self.shared_vocab, self.name = lm, shared_vocab, name
        self.forwards = 0

    def begin(self, prompt: list[int]) -> None:
        self.cache, self.cached, self.base, self.k = self.lm.new_cache(), 0, 0, 0

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._propose(tokens, k, None, None)[0]

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As propose, but each token is drawn from the draft's warped distribution q over the
        shared vocabulary; returns (tokens [d], q [d, shared_vocab])."""
        return self._propose(tokens, k, warp, generator)

    def _propose(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.base, self.k = len(tokens), k
        if k == 0:
            return torch.empty(0, dtype=torch.long, device=self.lm.device), None
        ids = torch.tensor([tokens[self.cached:]], device=self.lm.device)  # [1, S] uncached tail
        out, qs = [], []
        for _ in range(k):
            logits = self.lm.forward(ids, self.cache, keep=1)[-1, : self.shared_vocab]  # [V]
            if warp is None:
                ids = logits.argmax().view(1, 1)  # greedy; stays on device: no host sync while drafting
            else:
                qs.append(warp(logits))  # [V]: the draft's distribution q
                ids = torch.multinomial(qs[-1], 1, generator=generator).view(1, 1)
            out.append(ids[0])
        self.forwards += k
        self.cached = len(tokens) + k - 1
        return torch.cat(out), (torch.stack(qs) if qs else None)

    def update(self, tokens: list[int], accepted: int) -> None:
        # Proposals 1..accepted are now part of `tokens`; the rest of the cache is stale.
        keep = min(self.cached, self.base + min(accepted, self.k - 1))
        self.cache.crop(keep - self.cached)  # crop(0) still trims sliding-window layers
        self.cached = keep


class PromptLookupDraft:
    """n-gram lookup: find the latest earlier occurrence of the last n tokens (n = max_ngram
    down to min_ngram) in prompt + output, and propose the tokens that followed it.
    Costs no model call; proposes nothing when no n-gram matches."""

    def __init__(self, device, max_ngram: int = 3, min_ngram: int = 1, name: str = "prompt-lookup"):
        self.device, self.max_ngram, self.min_ngram, self.name = device, max_ngram, min_ngram, name
        self.forwards = 0

    def begin(self, prompt: list[int]) -> None:
        pass

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        seq = np.asarray(tokens, dtype=np.int64)
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n] earlier n-grams
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n  # the latest match; continuation starts after it
                return seq[start : start + k].tolist()
        return []

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        proposal = self.lookup(tokens, k) if k else []
        return torch.tensor(proposal, dtype=torch.long).to(self.device, non_blocking=True)

    def update(self, tokens: list[int], accepted: int) -> None:
        pass


def _coin(seed: int, position: int) -> float:
    """A reproducible uniform [0, 1) draw for (seed, absolute position)."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, position), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class OracleDraft:
    """Proposes the target's own greedy token with probability `agree` per position, else a
    wrong one, reproducibly from `seed` (the draw depends only on seed and absolute position).

    `oracle(tokens)` returns the target's greedy next token: the toy target computes it
    directly; the synthetic draft reads it from a greedy reference decode of the real target.
    Counts one draft forward per proposed token, as a real autoregressive draft would.
    """

    def __init__(self, oracle: Callable[[list[int]], int], vocab: int, agree: float, seed: int,
                 device, name: str):
        self.oracle, self.vocab, self.agree, self.seed = oracle, vocab, agree, seed
        self.device, self.name = device, name
        self.forwards = 0

    def begin(self, prompt: list[int]) -> None:
        pass

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        context, out = list(tokens), []
        for _ in range(k):
            right = self.oracle(context)
            u = _coin(self.seed, len(context))
            token = right if u < self.agree else (right + 1 + int(u * 1e6) % (self.vocab - 1)) % self.vocab
            out.append(token)
            context.append(token)
        self.forwards += k
        return torch.tensor(out, dtype=torch.long).to(self.device, non_blocking=True)

    def update(self, tokens: list[int], accepted: int) -> None:
        pass


class SyntheticDraft(OracleDraft):
    """The agreement-controlled draft on a real target: its oracle is the target's own greedy
    decode of the same prompt, looked up in `references` (filled by a greedy run beforehand,
    so the timed speculative run pays nothing for it). Isolates how the loop's speed scales
    with acceptance."""

    def __init__(self, references: dict, vocab: int, agree: float, seed: int, device, name: str):
        super().__init__(self._oracle, vocab, agree, seed, device, name)
        self.references = references

    def begin(self, prompt: list[int]) -> None:
        ref = self.references.get(tuple(prompt))
        if ref is None:
            raise SpecdecError("synthetic draft: no greedy reference for this prompt (run greedy first)", 1)
        self.start, self.ref = len(prompt), ref

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        # Past the reference's end (its EOS) the target's choice is unknown and the request is
        # over anyway: never propose there, so agreement 1.0 is accepted in full.
        return super().propose(tokens, max(0, min(k, len(self.ref) - (len(tokens) - self.start))))

    def _oracle(self, context: list[int]) -> int:
        i = len(context) - self.start  # valid while context = prompt + reference prefix
        return self.ref[i] if i < len(self.ref) else 0


class AdaptiveK:
    """Wraps any draft with transformers' 'heuristic' schedule: the round's draft length grows
    by 2 after a round where every proposed token was accepted and shrinks by 1 (to at least 1)
    otherwise, never above the loop's k. Cheap rounds when the draft is off, long ones when on."""

    def __init__(self, draft, start: int = 2):
        self.draft, self.start = draft, start
        self.name = f"{draft.name}+adaptive"

    @property
    def forwards(self) -> int:
        return self.draft.forwards

    def begin(self, prompt: list[int]) -> None:
        self.limit, self.drafted = self.start, 0
        self.draft.begin(prompt)

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        proposal = self.draft.propose(tokens, min(k, self.limit))
        self.drafted = proposal.shape[0]
        return proposal

    def propose_sampled(self, tokens: list[int], k: int, warp, generator):
        proposal, q = propose_sampled(self.draft, tokens, min(k, self.limit), warp, generator)
        self.drafted = proposal.shape[0]
        return proposal, q

    def update(self, tokens: list[int], accepted: int) -> None:
        if self.drafted:  # a round with no proposal says nothing about the draft
            self.limit = self.limit + 2 if accepted == self.drafted else max(1, self.limit - 1)
        self.draft.update(tokens, accepted)


def propose_sampled(draft, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A draft's sampled proposal and its q; drafts without `propose_sampled` are deterministic
    (q None: a one-hot q on the proposed token)."""
    if hasattr(draft, "propose_sampled"):
        return draft.propose_sampled(tokens, k, warp, generator)
    return draft.propose(tokens, k), None
