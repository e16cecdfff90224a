"""Sampling (temperature > 0): plain sampling and speculative sampling, exact in distribution.

Greedy (temperature 0) is exact token for token and lives in decoding.py; callers dispatch
there. Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) keeps a weaker but still
exact promise: its output has the same distribution as plain sampling from the target. Both
loops share decoding.py's prefill, stop rule and statistics, and draw every random number from
one `torch.Generator`, so a seed fixes the output.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .decoding import Result, _elapsed, prefill, stop
from .drafts import propose_sampled
from .metrics import Round, Stats


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy: the exact-per-token path in decoding.py
    top_k: int = 0  # keep only the k most likely tokens (0 = off)
    top_p: float = 1.0  # keep the smallest most-likely set holding >= top_p of the mass (1 = off)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.temperature, self.top_k, self.top_p)


def warp(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits [..., V] -> probabilities [..., V], in transformers' order: divide by the
    temperature, keep the top_k largest (ties with the k-th kept), then the smallest most-likely
    set whose mass reaches top_p (the most likely token always stays). Temperature 0 = one-hot argmax."""
    logits = logits.float()
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        probs, order = logits.softmax(-1).sort(dim=-1, descending=True, stable=True)  # stable: reproducible ties
        drop = probs.cumsum(-1) - probs >= top_p  # the more likely tokens already hold top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))  # back to vocab order
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token id drawn from probs [V] (shape [1], stays on the device)."""
    return torch.multinomial(probs, 1, generator=generator)


# The two rules that make speculative sampling exact, kept apart so tests can break them on purpose.
def accept(u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """Keep draft token x with probability min(1, p(x)/q(x)): u < p/q with u ~ U[0, 1), written
    u·q < p (q(x) > 0 since x was drawn from q; p(x) = 0 is never kept; p >= q always is)."""
    return u * q_x < p_x


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), up to the norm (multinomial normalises): where a rejected draft leaves
    the target's mass. q = 0 gives p itself. p == q leaves nothing (then no rejection can happen,
    bar rounding): fall back to p."""
    r = (p - q).clamp(min=0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def start_cache(target, prompt: list[int], prefix=None) -> tuple[object, int]:
    """A cache holding prompt[:-1], and the forwards that took: a copy of `prefix` (this prompt's
    prefill, made once by a caller drawing many samples of it) or a fresh prefill."""
    if prefix is not None:
        return copy.deepcopy(prefix), 0
    cache = target.new_cache()
    return cache, prefill(target, cache, prompt)


def _as_q(q: torch.Tensor | None, proposal: torch.Tensor, vocab: int) -> torch.Tensor:
    """The draft's distributions [d, vocab] in the target's vocabulary: a deterministic proposal
    (q None) is a one-hot q; a draft over a narrower shared vocabulary has q = 0 beyond it."""
    if q is None:
        return F.one_hot(proposal, vocab).float()
    q = q.float()
    return F.pad(q, (0, vocab - q.shape[-1])) if q.shape[-1] < vocab else q[:, :vocab]


@torch.inference_mode()
def sample_decode(target, prompt: list[int], max_tokens: int, eos: frozenset[int], settings: Sampling,
                  generator: torch.Generator, prefix=None) -> Result:
    """The target alone, one token per forward, drawn from its warped distribution: the
    reference speculative_sample must match in distribution."""
    start = time.perf_counter()
    cache, forwards = start_cache(target, prompt, prefix)
    stats = Stats(target_forwards=forwards)
    last = torch.tensor([[prompt[-1]]], device=target.device)  # [1, 1]
    out, done = [], False
    while not done:
        p = settings.warp(target.forward(last, cache)[-1])  # [V]: the target's next-token distribution
        last = sample(p, generator).view(1, 1)
        new, done = stop([int(last)], len(out), max_tokens, eos)  # int(): the step's one sync
        out += new
        stats.observe(Round(drafted=0, accepted=0, emitted=len(new)))
    stats.wall_s = _elapsed(start, target.device)
    return Result(out, stats)


@torch.inference_mode()
def speculative_sample(target, draft, prompt: list[int], k: int, max_tokens: int, eos: frozenset[int],
                       settings: Sampling, generator: torch.Generator, prefix=None) -> Result:
    """The draft samples up to k tokens from its warped distribution q; the target scores them all
    in one forward (warped: p); keep each in turn with probability min(1, p(x)/q(x)); at the first
    rejection draw the correction from norm(max(0, p - q)); after a full accept draw the bonus
    token from p. Every emitted token is then distributed as plain sampling from p.

    Invariants at the top of every round (as speculative_decode):
      tokens = prompt + out, and the target cache holds tokens[:-1], so one forward over
      [tokens[-1], proposal] yields p after every prefix;
      the draft has been told every round's outcome (update), so its state matches `tokens`.
    """
    start, draft_forwards = time.perf_counter(), draft.forwards
    cache, forwards = start_cache(target, prompt, prefix)
    stats = Stats(target_forwards=forwards)
    draft.begin(prompt)
    tokens, out, rounds, done = list(prompt), [], [], False
    while not done:
        room = max_tokens - len(out)
        proposal, q = propose_sampled(draft, tokens, min(k, room - 1), settings.warp, generator)  # [d], q [d, V'] | None
        d = proposal.shape[0]
        ids = torch.cat([torch.tensor([tokens[-1]], device=target.device), proposal])[None]  # [1, d+1]
        p = settings.warp(target.forward(ids, cache))  # [d+1, V]: the target's distribution after each prefix
        q = _as_q(q, proposal, p.shape[-1])  # [d, V]
        x = proposal[:, None]  # [d, 1]
        u = torch.rand(d, generator=generator, device=target.device)
        kept = accept(u, p[:d].gather(1, x)[:, 0], q.gather(1, x)[:, 0])  # [d]: min(1, p(x)/q(x)) each
        n = kept.int().cumprod(0).sum()  # accepted = the leading run of kept tokens
        # Row n < d: the correction after rejecting proposal[n]; row d (q = 0 there): the bonus from p.
        q = torch.cat([q, q.new_zeros(1, q.shape[-1])])  # [d+1, V]
        fix = sample(residual(p[n], q[n]), generator)  # [1]
        n, fix, *proposed = torch.cat([n.view(1), fix, proposal]).tolist()  # the round's one host sync
        cache.crop(n - d)  # drop rejected positions: cache now holds tokens + proposal[:n]
        new, done = stop(proposed[:n] + [fix], len(out), max_tokens, eos)  # accepted + correction/bonus
        tokens += new
        out += new
        draft.update(tokens, n)
        rounds.append(Round(drafted=d, accepted=n, emitted=len(new)))
        stats.observe(rounds[-1])
    stats.draft_forwards = draft.forwards - draft_forwards
    stats.wall_s = _elapsed(start, target.device)
    return Result(out, stats, rounds)


# ---------------------------------------------------------------------------- exact reference
def prefix_distribution(next_probs, prompt: list[int], positions: int, eos: frozenset[int],
                        min_prob: float) -> list[dict[tuple, float]]:
    """The exact probability of every prefix of the first 1..`positions` generated tokens that
    has probability >= min_prob, for a target that can compute its next-token distribution
    from scratch (`next_probs(tokens) -> [V]`, e.g. the toy). A prefix ending in EOS is final:
    it stays, unchanged, among the longer ones. Only prefixes >= min_prob are expanded (their
    children are no likelier), so the work is at most positions / min_prob calls.
    Returns one {prefix: probability} per length 1..positions."""
    levels, frontier = [], {(): 1.0}
    for _ in range(positions):
        level = {}
        for prefix, prob in frontier.items():
            if prefix and prefix[-1] in eos:
                level[prefix] = prob
                continue
            probs = next_probs(list(prompt) + list(prefix)).double()
            for token in torch.nonzero(probs * prob >= min_prob).flatten().tolist():
                level[prefix + (token,)] = prob * float(probs[token])
        levels.append(level)
        frontier = level
    return levels


def sequence_probability(next_probs, prompt: list[int], seq: tuple) -> float:
    """The exact probability that generation starts with `seq` (a prefix, or a shorter sequence
    ended by EOS) under `next_probs(tokens) -> [V]`."""
    prob = 1.0
    for i, token in enumerate(seq):
        prob *= float(next_probs(list(prompt) + list(seq[:i]))[token])
    return prob
