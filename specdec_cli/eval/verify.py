"""Exactness checks: speculative == greedy for many prompts x k x drafts, and why not if not."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator

import torch
import yaml

from specdec_cli.cards.card import draft_spec
from specdec_cli.drafts import Draft
from specdec_cli.errors import SpecdecError
from specdec_cli.pair.generation import first_divergence
from specdec_cli.loop.metrics import Stats
from specdec_cli.pair.loading import Pair, needs_reference
from specdec_cli.cards.prompts import Prompt
from specdec_cli.loop.sampling import prefix_distribution, sequence_probability
from specdec_cli.eval.stattest import MIN_EXPECTED, ChiSquare, goodness_of_fit, homogeneity


@dataclass
class Check:
    id: str
    k: int
    draft: str
    prompt_tokens: int
    spec_tokens: list[int]
    greedy_tokens: list[int]
    first_divergence: dict | None
    shapes: str = "free"
    logits: dict | None = None  # --bitwise: logit_rows(); None when not compared
    drafted: int = 0  # the speculative run's proposed tokens...
    accepted: int = 0  # ...and how many were kept: 0 drafted and spec == greedy says nothing

    @property
    def identical(self) -> bool:
        return self.spec_tokens == self.greedy_tokens

    @property
    def bitwise(self) -> bool | None:
        return None if self.logits is None else self.logits["bitwise"]

    @property
    def passed(self) -> bool:
        """Identical tokens, and under pinned shapes with --bitwise, bitwise-equal logits too."""
        return self.identical and not (self.shapes == "pinned" and self.bitwise is False)

    def as_dict(self) -> dict:
        return {"id": self.id, "k": self.k, "draft": self.draft, "prompt_tokens": self.prompt_tokens,
                "spec_tokens": self.spec_tokens, "greedy_tokens": self.greedy_tokens, "shapes": self.shapes,
                "identical": self.identical, "first_divergence": self.first_divergence, "drafted": self.drafted,
                "accepted": self.accepted, **(self.logits or {})}


def logit_rows(greedy: list, spec: list) -> dict:
    """Compare the target's logits row by row at every emitted position both runs share (up to
    their first token divergence): {bitwise, and on a difference bitwise_divergence: the first
    position and the largest absolute difference there, and over all positions}."""
    pairs = list(zip(greedy, spec))
    first = next((i for i, (g, s) in enumerate(pairs) if not torch.equal(g, s)), None)
    if first is None:
        return {"bitwise": True, "logit_rows": len(pairs), "bitwise_divergence": None}
    worst = max(float((g - s).abs().max()) for g, s in pairs)
    return {"bitwise": False, "logit_rows": len(pairs),
            "bitwise_divergence": {"index": first, "max_abs_diff": float((pairs[first][0] - pairs[first][1]).abs().max()),
                                   "max_abs_diff_all": worst}}


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


def verify(pair: Pair, prompts: list[Prompt], ks: list[int], drafts: list[Draft], max_tokens: int,
           bitwise: bool = False, batch: int = 1) -> Iterator[Check]:
    """Greedy once per prompt (pinned shapes: once per width k + 1, the shape the speculative run
    takes), then every draft at every k against it; `bitwise` compares the logits too. `batch`
    > 1 runs every prompt through the batched loop at once, greedy first."""
    if batch == 1:
        for prompt in prompts:
            yield from _checks(pair, [prompt], ks, drafts, max_tokens, bitwise, 1)
    else:
        yield from _checks(pair, prompts, ks, drafts, max_tokens, bitwise, batch)


def _checks(pair: Pair, prompts: list[Prompt], ks: list[int], drafts: list[Draft], max_tokens: int,
            bitwise: bool, batch: int) -> Iterator[Check]:
    ids = [pair.encode(p.text, max_tokens, drafts) for p in prompts]
    for draft in drafts:  # the cost profile (and so each width's matmul form) before any run
        pair.prepare(max(ks), draft)
    widths = list(dict.fromkeys(pair.width(k) for k in ks))
    greedy = {w: _run(pair, ids, 0, max_tokens, batch, None, w, bitwise) for w in widths}
    for prompt_ids, r in zip(ids, greedy[widths[0]]):  # the synthetic draft reads the greedy reference
        pair.references[tuple(prompt_ids)] = r.tokens
    for draft in drafts:
        for k in ks:
            spec = _run(pair, ids, k, max_tokens, batch, draft, pair.width(k), bitwise)
            for prompt, prompt_ids, g, s in zip(prompts, ids, greedy[pair.width(k)], spec):
                yield Check(prompt.id, k, draft.name, len(prompt_ids), s.tokens, g.tokens,
                            first_divergence(pair, prompt_ids, g.tokens, s.tokens), pair.shapes,
                            logit_rows(g.logits, s.logits) if bitwise else None, s.stats.drafted, s.stats.accepted)


def _run(pair: Pair, ids: list[list[int]], k: int, max_tokens: int, batch: int, draft, width, trace: bool) -> list:
    """Results for every prompt in input order: plain greedy (draft None) or speculative."""
    if batch > 1:
        from specdec_cli.loop.batch import run

        if draft is not None:
            pair.prepare(k, draft)
        return [r for _, r in run(pair, ids, k, max_tokens, batch, draft, width, trace)]
    if draft is None:
        return [pair.greedy(p, max_tokens, k=(width - 1) if width else None, trace=trace) for p in ids]
    return [pair.spec(p, k, max_tokens, draft, trace=trace) for p in ids]


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
