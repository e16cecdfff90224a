"""Drafts: everything that proposes tokens for the target to verify.

One protocol (after transformers' candidate generators):
    begin(prompt)              start a new request (drop all per-request state)
    propose(tokens, k) -> [d]  up to k token ids continuing `tokens`, on the target's device
    update(tokens, accepted, new)  the round is over: `tokens` is the new sequence, the first
                               `accepted` proposed tokens were kept, and `new` (a device tensor)
                               holds the tokens just appended, so a draft needs no host copy
    forwards                   model calls made so far (a counter, never reset by begin)
Optional, for sampling (temperature > 0):
    propose_sampled(tokens, k, warp, generator) -> ([d], q [d, V] or None)
                               tokens drawn from the draft's warped distribution q, and q for
                               each; a draft without it proposes deterministically (one-hot q)
    step_seconds(context) -> s one proposed token's measured cost (the cost model's c); a
                               draft without it makes no model call and costs nothing
    context_key(tokens, k)     a small int the schedule conditions acceptance on (prompt
                               lookup: the matched n-gram length); absent = always 0
    free                       True when proposing costs nothing (a schedule may peek)
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
    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None: ...


class ModelDraft:
    """A causal LM that proposes its own greedy tokens, with its own KV cache.

    Cache invariant: `self.cached` positions of `tokens` are in the draft cache and `pending`
    holds tokens[cached:] on the device. A proposal of k feeds `pending`, then k-1 of its own
    tokens (the k-th is never fed). Tokens never come back from the host: the loop hands the
    round's new tokens over as a device tensor, so drafting costs no host-to-device copy and
    no sync (the LM head runs on the last position only: keep=1).
    """

    def __init__(self, lm, shared_vocab: int, name: str = "model"):
        self.lm, self.shared_vocab, self.name = lm, shared_vocab, name
        self.forwards = 0

    def begin(self, prompt: list[int]) -> None:
        self.cache, self.cached, self.base, self.k = self.lm.new_cache(), 0, 0, 0
        self.pending = torch.tensor(prompt, device=self.lm.device)  # [S]: once per request

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._propose(tokens, k, None, None)[0]

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As propose, but each token is drawn from the draft's warped distribution q over the
        shared vocabulary; returns (tokens [d], q [d, shared_vocab])."""
        return self._propose(tokens, k, warp, generator)

    def _propose(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        from .sampling import sample

        self.base, self.k = len(tokens), k
        if k == 0:
            return self.pending[:0], None
        ids = self.pending[None]  # [1, S] the uncached tail
        out, qs = [], []
        for _ in range(k):
            logits = self.lm.forward(ids, self.cache, keep=1)[-1, : self.shared_vocab]  # [V]
            if warp is None:
                token = logits.argmax().view(1)  # greedy; stays on device: no host sync while drafting
            else:
                qs.append(warp(logits))  # [V]: the draft's distribution q
                token = sample(qs[-1], generator).view(1)
            out.append(token)
            ids = token[None]  # [1, 1]
        self.forwards += k
        self.cached = len(tokens) + k - 1
        return torch.cat(out), (torch.stack(qs) if qs else None)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        if self.k == 0:  # nothing proposed: the draft is simply further behind
            self.pending = torch.cat([self.pending, _on(new, tokens, self.base, self.lm.device)])
            return
        # Proposals 1..accepted are now part of `tokens`; the rest of the cache is stale.
        keep = min(self.cached, self.base + min(accepted, self.k - 1))
        self.cache.crop(keep - self.cached)  # crop(0) still trims sliding-window layers
        self.cached = keep
        fresh = _on(new, tokens, self.base, self.lm.device)  # tokens[base:]
        self.pending = fresh[keep - self.base:]  # tokens[keep:], keep >= base

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token (one 1-token forward after `context`)."""
        from .costs import forward_seconds

        return forward_seconds([(self.lm, 1)], context)[0]


def _on(new: torch.Tensor | None, tokens: list[int], base: int, device) -> torch.Tensor:
    """tokens[base:] as a device tensor: the loop's `new` when given, else copied from the host."""
    if new is not None and new.shape[0] == len(tokens) - base:
        return new
    return torch.tensor(tokens[base:], dtype=torch.long, device=device)


MAX_PROPOSAL = 64  # cards.MAX_K: the longest continuation a lookup keeps


class PromptLookupDraft:
    """n-gram lookup: find the latest earlier occurrence of the last n tokens (n = max_ngram
    down to min_ngram) in prompt + output, and propose the tokens that followed it.
    Costs no model call; proposes nothing when no n-gram matches."""

    free = True  # no model call: a schedule may peek at its proposal at no cost

    def __init__(self, device, max_ngram: int = 3, min_ngram: int = 1, name: str = "prompt-lookup"):
        self.device, self.max_ngram, self.min_ngram, self.name = device, max_ngram, min_ngram, name
        self.forwards = 0
        self.pin = torch.device(device).type == "cuda"  # pinned host memory: an async copy, no sync
        self._last: tuple = (None, 0, [])

    def begin(self, prompt: list[int]) -> None:
        self._last = (None, 0, [])

    def match(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(n, continuation): the longest n-gram (max_ngram down to min_ngram) ending `tokens`
        that occurred earlier, and up to k tokens that followed its latest occurrence; (0, [])
        when nothing matches. The schedule conditions acceptance on n."""
        key = hash(tuple(tokens))
        if self._last[0] == key:  # asked twice for the same round (schedule, then propose)
            return self._last[1], self._last[2][:k]
        seq = np.asarray(tokens, dtype=np.int64)
        found = (0, [])
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n] earlier n-grams
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n  # the latest match; continuation starts after it
                found = (n, seq[start : start + MAX_PROPOSAL].tolist())
                break
        self._last = (key, *found)
        return found[0], found[1][:k]

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        return self.match(tokens, k)[1] if k else []

    def context_key(self, tokens: list[int], k: int) -> int:
        return self.match(tokens, k)[0]

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._on_device(self.lookup(tokens, k)[:k])

    def filler(self, tokens: list[int]) -> torch.Tensor:
        """One token to verify when nothing matched (schedule.Scheduled.fills): the last one."""
        return self._on_device(tokens[-1:])

    def _on_device(self, ids: list[int]) -> torch.Tensor:
        proposal = torch.tensor(ids, dtype=torch.long)
        return (proposal.pin_memory() if self.pin else proposal).to(self.device, non_blocking=True)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
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

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        pass


class SyntheticDraft(OracleDraft):
    """The agreement-controlled draft on a real target: its oracle is the target's own greedy
    decode of the same prompt, looked up in `references` (filled by a greedy run beforehand,
    so the timed speculative run pays nothing for it). Isolates how the loop's speed scales
    with acceptance."""

    needs_reference = True  # the request's greedy run must come first (pair.needs_reference)

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
