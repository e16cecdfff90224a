"""Exactness checks: speculative == greedy for many prompts x k x drafts, and why not if not."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator

import yaml

from .cards import draft_spec
from .drafts import Draft
from .errors import SpecdecError
from .metrics import Stats
from .pair import Pair, needs_reference
from .prompts import Prompt
from .sampling import prefix_distribution, sequence_probability
from .stattest import MIN_EXPECTED, ChiSquare, goodness_of_fit, homogeneity


@dataclass
class Check:
    id: str
    k: int
    draft: str
    prompt_tokens: int
    spec_tokens: list[int]
    greedy_tokens: list[int]
    first_divergence: dict | None

    @property
    def identical(self) -> bool:
        return self.spec_tokens == self.greedy_tokens

    def as_dict(self) -> dict:
        return {"id": self.id, "k": self.k, "draft": self.draft, "prompt_tokens": self.prompt_tokens,
                "spec_tokens": self.spec_tokens, "greedy_tokens": self.greedy_tokens,
                "identical": self.identical, "first_divergence": self.first_divergence}


def parse_draft_option(text: str):
    """`KIND[:key=value,...]`, e.g. `early-exit:layers=12`, `toy:agree=0.5,seed=3`."""
    kind, _, rest = text.partition(":")
    raw = {"kind": kind.strip()}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise SpecdecError(f"--draft {text!r}: expected key=value after ':', got {item!r}")
        raw[key.strip()] = yaml.safe_load(value) if value.strip() else value
    return draft_spec(f"--draft {text!r}", raw, field="draft")


def first_divergence(pair: Pair, prompt_ids: list[int], greedy: list[int], spec: list[int]) -> dict | None:
    """Where the two outputs part, both tokens there, and how close the target's call was."""
    if greedy == spec:
        return None
    i = next((j for j, (g, s) in enumerate(zip(greedy, spec)) if g != s), min(len(greedy), len(spec)))
    g, s = (greedy[i] if i < len(greedy) else None), (spec[i] if i < len(spec) else None)
    piece = pair.tokenizer.piece
    return {"index": i, "greedy_token": g, "spec_token": s,
            "greedy_text": piece(g) if g is not None else None, "spec_text": piece(s) if s is not None else None,
            "margin": pair.top2_margin(prompt_ids + greedy[:i])}


def verify(pair: Pair, prompts: list[Prompt], ks: list[int], drafts: list[Draft], max_tokens: int) -> Iterator[Check]:
    """Greedy once per prompt, then every draft at every k against it."""
    for prompt in prompts:
        ids = pair.encode(prompt.text, max_tokens, drafts)
        greedy = pair.greedy(ids, max_tokens).tokens
        for draft in drafts:
            for k in ks:
                spec = pair.spec(ids, k, max_tokens, draft).tokens
                yield Check(prompt.id, k, draft.name, len(ids), spec, greedy,
                            first_divergence(pair, ids, greedy, spec))


# ---------------------------------------------------------------------------- sampling (T > 0)
# The default prompts at temperature > 0: one short prompt from each of three categories (each
# test needs hundreds of draws; short prompts keep a real model's run to minutes).
SAMPLING_PROMPTS = ("qa-1", "trans-2", "code-1")


@dataclass
class SampleCheck:
    """One statistical test: the joint of the first `positions` generated tokens over `samples`
    speculative draws, against the exact distribution (a target that can compute it, the toy)
    or against as many plain-sampling draws (any other target)."""
    id: str
    k: int
    draft: str
    prompt_tokens: int
    positions: int
    samples: int
    reference: str  # "exact" or "plain"
    test: ChiSquare
    threshold: float  # alpha / number of tests (Bonferroni)
    stats: Stats  # every speculative draw's rounds, together

    @property
    def passed(self) -> bool:
        return self.test.p_value >= self.threshold

    def as_dict(self) -> dict:
        return {"id": self.id, "k": self.k, "draft": self.draft, "prompt_tokens": self.prompt_tokens,
                "positions": self.positions, "samples": self.samples, "reference": self.reference,
                **self.test.as_dict(), "threshold": self.threshold, "passed": self.passed,
                "accept_rate": self.stats.accept_rate, "tokens_per_round": self.stats.tokens_per_round}


def verify_sampling(pair: Pair, prompts: list[Prompt], ks: list[int], drafts: list[Draft], samples: int,
                    positions: int, alpha: float, generator, progress=None) -> Iterator[SampleCheck]:
    """Speculative sampling must draw from the target's own (warped) distribution. Per prompt x
    draft x k, draw `samples` speculative continuations of `positions` tokens and test the joint
    distribution of the first 1..positions tokens: chi-square goodness of fit against the exact
    probabilities when the target can compute them (`next_logits`, the toy), else chi-square
    homogeneity against `samples` plain-sampling draws of the same prompt. Every test must keep
    p >= alpha / (number of tests) (Bonferroni: an exact sampler fails any with probability <= alpha)."""
    tests = len(prompts) * len(drafts) * len(ks) * positions
    exact = hasattr(pair.target, "next_logits")
    next_probs = lambda tokens: pair.sampling.warp(pair.target.next_logits(tokens))  # noqa: E731
    for prompt in prompts:
        ids = pair.encode(prompt.text, positions, drafts)
        if any(needs_reference(d) for d in drafts):
            pair.reference(ids, positions)
        prefix = pair.prefill(ids)  # every draw of this prompt starts from a copy
        if exact:
            levels = prefix_distribution(next_probs, ids, positions, pair.eos, MIN_EXPECTED / samples)
        else:
            plain = []
            for i in range(samples):
                plain.append(tuple(pair.sample(ids, positions, generator, prefix).tokens))
                if progress and i % 10 == 0:
                    progress(f"{prompt.id}: plain sampling {i}/{samples}")
        for draft in drafts:
            for k in ks:
                draws, stats = [], Stats()
                for i in range(samples):
                    result = pair.spec(ids, k, positions, draft, generator, prefix)
                    draws.append(tuple(result.tokens))
                    for r in result.rounds:
                        stats.observe(r)
                    if progress and i % 10 == 0:
                        progress(f"{prompt.id}: {draft.name} k={k} speculative sampling {i}/{samples}")
                for j in range(1, positions + 1):
                    seen = Counter(d[:j] for d in draws)
                    if exact:  # bins: the prefixes with expected count >= 5, fixed before drawing
                        bins = levels[j - 1]
                        zero = sum(n for s, n in seen.items() if s not in bins and not sequence_probability(next_probs, ids, s))
                        test = goodness_of_fit(seen, bins, impossible=zero)
                    else:
                        test = homogeneity(seen, Counter(d[:j] for d in plain))
                    yield SampleCheck(prompt.id, k, draft.name, len(ids), j, samples,
                                      "exact" if exact else "plain", test, alpha / tests, stats)
