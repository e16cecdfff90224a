"""Whole requests on a resident pair (pair.py): one prompt greedy beside speculative
(`generate`), many prompts batched with their throughput (`generate_many`, `Summary`), and where
two outputs part (`first_divergence`).

At temperature > 0 the target-alone run is plain sampling; both runs use the card's seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

from specdec_cli.loop.batch import run as batched
from specdec_cli.loop.decoding import Result, _elapsed
from specdec_cli.engine.memory import peak_rss_mb
from specdec_cli.loop.metrics import speedup
from specdec_cli.pair.loading import Pair, needs_reference


@dataclass
class Generation:
    """One prompt's request: the target alone beside the speculative run (either may be absent)."""

    prompt: str
    prompt_ids: list[int]
    k: int
    greedy: Result | None  # the target alone: greedy, or plain sampling when `sampled`
    spec: Result | None
    sampled: bool = False  # temperature > 0: both runs are exact in distribution, not per token
    peak_rss_mb: float | None = None  # the process's peak resident memory after the runs (pair loaded)

    @property
    def identical(self) -> bool | None:
        return self.greedy.tokens == self.spec.tokens if self.greedy and self.spec else None

    @property
    def diverged(self) -> bool:
        """Greedy outputs that differ: a bug. Two samples that differ are not."""
        return self.identical is False and not self.sampled

    @property
    def speedup(self) -> float | None:
        return speedup(self.greedy.stats, self.spec.stats) if self.greedy and self.spec else None


def generate(pair: Pair, prompt: str, mode: str, k: int, max_tokens: int) -> Generation:
    """Run one prompt greedy and/or speculative (greedy first: synthetic drafts need it).
    At temperature > 0 the target-alone run is plain sampling; both runs use the card's seed."""
    ids = pair.encode(prompt, max_tokens)
    if mode != "greedy":
        pair.prepare(k)  # measure (or read) the cost profile now, not inside the timed run
    sampled = not pair.sampling.greedy
    alone = pair.sample if sampled else pair.greedy
    greedy = alone(ids, max_tokens, k=k) if mode in ("greedy", "both") else None
    if mode != "greedy" and needs_reference(pair.draft):
        pair.reference(ids, max_tokens)
    spec = pair.spec(ids, k, max_tokens) if mode in ("spec", "both") else None
    return Generation(prompt, ids, k, greedy, spec, sampled, peak_rss_mb())


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


# ---------------------------------------------------------------------------- many requests, batched
@dataclass
class Summary:
    """A whole batched run: tokens and wall time per mode (throughput = tokens / wall_s)."""

    prompts: int
    batch: int
    modes: dict = field(default_factory=dict)  # mode -> {"tokens", "wall_s"}
    differ: int = 0

    def as_dict(self) -> dict:
        out = {"prompts": self.prompts, "batch": self.batch, "differ": self.differ}
        for mode, m in self.modes.items():
            out[mode] = {**m, "tokens_per_s": m["tokens"] / m["wall_s"] if m["wall_s"] > 0 else None}
        return out


def timed(results: Iterator[tuple[int, Result]], summary: Summary, mode: str, device) -> Iterator[tuple[int, Result]]:
    start, tokens = time.perf_counter(), 0
    for index, result in results:
        tokens += len(result.tokens)
        yield index, result
    summary.modes[mode] = {"tokens": tokens, "wall_s": _elapsed(start, device)}


def generate_many(pair: Pair, prompts: list[str], mode: str, k: int, max_tokens: int, batch: int,
                  summary: Summary) -> Iterator[tuple[int, object, dict | None]]:
    """`generate` for many prompts, batched: yields (index, Generation, first divergence or
    None) in input order; `summary` is complete once the iterator is. The target-alone pass
    runs first (whole), then the speculative one streams."""
    ids = [pair.encode(p, max_tokens) for p in prompts]
    sampled = not pair.sampling.greedy
    alone = None
    if mode in ("greedy", "both") or (mode == "spec" and needs_reference(pair.draft)):
        alone = [r for _, r in timed(batched(pair, ids, 0, max_tokens, batch, width=pair.width(k)), summary,
                                     "sample" if sampled else "greedy", pair.device)]
        if not sampled:
            for prompt_ids, r in zip(ids, alone):
                pair.references[tuple(prompt_ids)] = r.tokens
    if mode == "spec" and alone is not None:
        summary.modes.pop("greedy", None)
    if mode == "greedy":
        for i, r in enumerate(alone):
            yield i, Generation(prompts[i], ids[i], k, r, None, sampled, peak_rss_mb()), None
        return
    pair.prepare(k)
    for i, spec in timed(batched(pair, ids, k, max_tokens, batch, pair.draft, pair.width(k)), summary, "spec", pair.device):
        greedy = alone[i] if mode == "both" else None
        gen = Generation(prompts[i], ids[i], k, greedy, spec, sampled, peak_rss_mb())
        summary.differ += gen.diverged
        yield i, gen, (first_divergence(pair, ids[i], greedy.tokens, spec.tokens) if gen.diverged else None)
