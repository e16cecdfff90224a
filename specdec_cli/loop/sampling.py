"""Sampling (temperature > 0): plain sampling and speculative sampling, exact in distribution.

Greedy (temperature 0) is exact token for token; speculative sampling (Leviathan et al. 2023;
Chen et al. 2023) keeps a weaker but still exact promise: its output has the same distribution
as plain sampling from the target. Both run decoding.py's one loop; sampling only swaps in the
`Sampler` verifier. Every random number comes from one `torch.Generator`, so a seed fixes the
output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specdec_cli.loop.decoding import NoDraft, Result, decode
from specdec_cli.loop.tree import Proposal, walk


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
    """One token id per row of probs [..., V], drawn without a host sync: the exponential race
    argmax(p / E) with E ~ Exponential(1) i.i.d. picks index i with probability p_i (the
    smallest of independent exponentials E_i / p_i). torch.multinomial would sync on CUDA."""
    race = torch.empty_like(probs).exponential_(1, generator=generator)
    race.clamp_(min=torch.finfo(race.dtype).tiny)  # an exact 0 would make 0/0 = NaN win the argmax
    return (probs / race).argmax(-1)


# The two rules that make speculative sampling exact, kept apart so tests can break them on purpose.
def accept(u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """Keep draft token x with probability min(1, p(x)/q(x)): u < p/q with u ~ U[0, 1), written
    u·q < p (q(x) > 0 since x was drawn from q; p(x) = 0 is never kept; p >= q always is)."""
    return u * q_x < p_x


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), up to the norm (sampling needs none). q = 0 gives p itself. p == q
    leaves nothing (then no rejection can happen, bar rounding): fall back to p."""
    r = (p - q).clamp(min=0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def _as_q(q: torch.Tensor | None, proposal: torch.Tensor, vocab: int) -> torch.Tensor:
    """The draft's distributions [d, vocab] in the target's vocabulary: a deterministic proposal
    (q None) is a one-hot q; a draft over a narrower shared vocabulary has q = 0 beyond it."""
    if q is None:
        return F.one_hot(proposal, vocab).float()
    q = q.float()
    return F.pad(q, (0, vocab - q.shape[-1])) if q.shape[-1] < vocab else q[:, :vocab]


class Sampler:
    """Speculative-sampling verification (Leviathan et al. 2023; Chen et al. 2023): the draft
    samples from its warped q; keep each proposal x in turn with probability min(1, p(x)/q(x));
    at the first rejection draw the correction from norm(max(0, p - q)); after a full accept draw
    the bonus from p. Every emitted token is then distributed as plain sampling from p.
    A token tree (deterministic, tree.py) is verified by ancestral sampling: the target draws
    its token after every slot, and the path follows its draws as long as a child holds them
    (SpecExec's rule): each emitted token is a draw from p after the tokens before it."""

    def __init__(self, settings: Sampling, generator: torch.Generator):
        self.settings, self.generator = settings, generator

    def propose(self, draft, tokens: list[int], d: int, trees: bool = False) -> Proposal:
        """Tokens [d] with q [d, V'] or None (a draft that does not sample is deterministic),
        or, with `trees`, a deterministic tree from a draft that proposes them."""
        if trees and draft.trees:
            return Proposal.tree(draft, tokens, d)
        return Proposal(*draft.propose_sampled(tokens, d, self.settings.warp, self.generator))

    def verify(self, logits: torch.Tensor, proposal: Proposal) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits [d+1, V] -> (accepted n: 0-dim, emitted [d+1], path [d+1]): emitted[:n+1] are
        the kept proposals and the correction/bonus, path[:n+1] their slots. Indexing by n is a
        gather/scatter: no host sync."""
        p = self.settings.warp(logits)  # [d+1, V]: the target's distribution after each slot
        if proposal.parents is not None:
            return walk(sample(p, self.generator), proposal)
        proposal, q, d = proposal.tokens, proposal.q, proposal.d
        q = _as_q(q, proposal, p.shape[-1])  # [d, V]
        x = proposal[:, None]  # [d, 1]
        u = torch.rand(d, generator=self.generator, device=p.device)
        kept = accept(u, p[:d].gather(1, x)[:, 0], q.gather(1, x)[:, 0])  # [d]
        n = kept.int().cumprod(0).sum()  # accepted = the leading run of kept tokens
        # Row i < d: the correction if proposal[i] is the first rejected; row d (q = 0): the bonus.
        fix = sample(residual(p, torch.cat([q, q.new_zeros(1, q.shape[-1])])), self.generator)  # [d+1]
        at = n.view(1)
        emitted = torch.cat([proposal, proposal.new_zeros(1)]).scatter(0, at, fix.gather(0, at))
        return n, emitted, torch.arange(d + 1, device=p.device)


def sample_decode(target, prompt: list[int], max_tokens: int, eos: frozenset[int], settings: Sampling,
                  generator: torch.Generator, prefix=None, width: int | None = None) -> Result:
    """The target alone, one token per forward, drawn from its warped distribution: the
    reference speculative_sample must match in distribution."""
    result = decode(target, NoDraft(target.device), prompt, 0, max_tokens, eos, Sampler(settings, generator), prefix,
                    width)
    return Result(result.tokens, result.stats)


def speculative_sample(target, draft, prompt: list[int], k: int, max_tokens: int, eos: frozenset[int],
                       settings: Sampling, generator: torch.Generator, prefix=None, width: int | None = None,
                       trees: bool = False) -> Result:
    """Speculative sampling: the output is distributed as sample_decode's (a token tree too)."""
    return decode(target, draft, prompt, k, max_tokens, eos, Sampler(settings, generator), prefix, width, trees=trees)


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
