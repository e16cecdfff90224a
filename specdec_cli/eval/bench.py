"""Timed comparisons: plain greedy vs speculative decoding of the same prompts in one run, the
agreement and k sweeps beside the theory, and transformers' own `generate` as a peer (peers.py).

Measurement only: `run()` (batch 1) and `run_batched()` (--batch N) yield rows of plain numbers
(benchrows.py) as they complete (one per prompt and configuration), so an interrupted run can
still show what it finished; `benchrows.summarize()` folds them into category and overall rows.
Tables, CSV, JSON and plots live in render.py / plot.py.

How a run is timed:
  - warm-up first (one short untimed decode of every mode), then the cost probes, then for
    every prompt `repeats` rounds of [greedy, each configuration, transformers' peers], so
    every mode sees the same machine conditions; the median wall time per prompt is reported;
  - greedy is timed first in every round: it also stores the target's reference decode that
    the synthetic draft reads, so the timed speculative runs pay nothing for it;
  - counters (tokens, rounds, forwards) are deterministic and taken from the first repeat.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from specdec_cli.eval.benchrows import BenchRow, PeerRow
from specdec_cli.cards.card import DraftSpec
from specdec_cli.engine.costs import CostProfile, _sync
from specdec_cli.loop.decoding import Result
from specdec_cli.drafts import Draft
from specdec_cli.pair.generation import first_divergence
from specdec_cli.loop.metrics import predict
from specdec_cli.pair.loading import Pair, build_draft, innermost
from specdec_cli.eval.peers import Peer, hf_generate
from specdec_cli.cards.prompts import Prompt

WARMUP_TOKENS = 16  # enough to touch every code path (prefill, rounds, rollback) once

Progress = Callable[[int, str], None]  # (steps done since last call, what is running)


# ---------------------------------------------------------------------------- configurations
class SimulatedCost(Draft):
    """Wraps a draft that makes no model call (synthetic) and sleeps `cost` target steps per
    proposed token, to emulate a real draft's price. Labelled: its cost is simulated. Its
    capabilities are Draft's defaults: the sleep is no model call the cost profile measures."""

    def __init__(self, draft: Draft, cost: float):
        self.draft, self.cost, self.step_s = draft, cost, 0.0  # step_s: set by the cost probe
        self.name = f"{draft.name}+simulated-cost={cost:g}"

    @property
    def forwards(self) -> int:
        return self.draft.forwards

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        self.draft.begin(prompt, features)

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        proposal = self.draft.propose(tokens, k)
        if k:
            time.sleep(self.cost * self.step_s * k)
        return proposal

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        self.draft.update(tokens, accepted, new, features)


@dataclass
class Config:
    """One speculative configuration to time: a draft at a k."""

    draft: Draft
    k: int
    agree: float | None = None  # the synthetic draft's agreement; None = the card's own draft
    verify_cost: float = 0.0  # v: one (k+1)-token target forward / one 1-token step (probed)
    draft_cost: float = 0.0  # c: one draft step / one target step (probed, or simulated)
    simulated: bool = False  # draft_cost is --draft-cost, not a measurement
    tree: bool = False  # the draft proposes token trees (docs/trees.md)


def configs(pair: Pair, ks: list[int], agrees: list[float] | None, seed: int = 0,
            draft_cost: float | None = None) -> list[Config]:
    """The configurations of a run: the synthetic draft at every (agreement, k) when sweeping
    agreement, then the card's own draft at every k (the extra row at its measured rate): as a
    chain, and when the run proposes trees (Pair.trees) as a tree too, so the two sit side by side."""
    out = []
    for a in agrees or []:
        for k in ks:
            draft = build_draft(DraftSpec("synthetic", agree=a, seed=seed, schedule="fixed"), pair)
            if draft_cost is not None:
                draft = SimulatedCost(draft, draft_cost)
            out.append(Config(draft, k, agree=a, draft_cost=draft_cost or 0.0, simulated=draft_cost is not None))
    return out + [Config(pair.draft, k, tree=tree) for k in ks for tree in ((False, True) if pair.trees else (False,))]


# ---------------------------------------------------------------------------- costs
def probe_costs(pair: Pair, configs: list[Config]) -> CostProfile:
    """Fill in every configuration's verify cost v = v(k+1) and draft cost c, in 1-token target
    steps, from the pair's cost profile (the one the cost schedule uses: measured once per
    machine and cached). c is measured for drafts that run a model, 0 for those that make no
    model call (prompt lookup, synthetic), or the simulated --draft-cost."""
    drafts = [c.draft for c in configs]
    profile = pair.cost_profile(tuple(drafts), max(c.k for c in configs) + 1)
    for c in configs:
        c.verify_cost = profile.v(c.k + 1)
        if isinstance(c.draft, SimulatedCost):
            c.draft.step_s = profile.step_s
        elif innermost(c.draft).name in profile.draft_s:
            c.draft_cost = profile.c(innermost(c.draft).name)
    return profile


# ---------------------------------------------------------------------------- the run
def environment() -> dict:
    """What the timings depend on besides the card: library versions and CPU threads."""
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads()}


def steps(prompts: int, configs: list[Config], repeats: int, peer: Peer | None) -> int:
    """Timed decodes in a run (for a progress bar)."""
    return prompts * repeats * (1 + len(configs) + (3 if peer else 0))


def run(pair: Pair, prompts: list[Prompt], configs: list[Config], max_tokens: int, repeats: int,
        peer: Peer | None = None, progress: Progress | None = None) -> Iterator[BenchRow | PeerRow]:
    """Time greedy and every configuration (and transformers' peers) on every prompt; yield
    one row per prompt and configuration as soon as that prompt is done."""
    tick = progress or (lambda n, text: None)
    # The baseline is the target alone: greedy, or plain sampling with the same warping and
    # seed when the card samples (then outputs are equal in distribution, not token for token).
    sampled = not pair.sampling.greedy
    baseline = pair.sample if sampled else pair.greedy
    encoded = [pair.encode(p.text, max_tokens) for p in prompts]  # bad prompts fail before any timing
    if not encoded:
        return
    tick(0, "warm-up")
    short = min(max_tokens, WARMUP_TOKENS)
    baseline(encoded[0], short)
    for c in configs:
        pair.spec(encoded[0], c.k, short, c.draft, trees=c.tree)
    if peer:
        pair.spec(encoded[0], peer.k, short, peer.draft)
        hf_generate(pair, encoded[0], short)
        hf_generate(pair, encoded[0], short, peer)
    tick(0, "probing verify and draft costs")
    profile = probe_costs(pair, configs)
    # Ours (card schedule, at most k): reuse a configuration's timing when it is the same draft and k.
    shared = next((i for i, c in enumerate(configs) if peer and c.draft is peer.draft and c.k == peer.k), None)

    pinned = pair.shapes == "pinned"
    for prompt, ids in zip(prompts, encoded):
        greedy: list[Result] = []
        free: list[Result] = []  # pinned shapes: free-shape greedy too, the honest baseline
        spec: list[list[Result]] = [[] for _ in configs]
        ours, hf_greedy, hf_assisted = [], [], []
        for r in range(repeats):
            where = f"{prompt.id} ({r + 1}/{repeats})"
            greedy.append(baseline(ids, max_tokens))  # first: stores the synthetic draft's reference
            tick(1, f"{where}: {'plain sampling' if sampled else 'greedy'}")
            if pinned and not sampled:
                free.append(pair.greedy(ids, max_tokens, free=True))
                tick(0, f"{where}: {'width-1' if pair.policy.compiled else 'free-shape'} greedy")
            for i, c in enumerate(configs):
                spec[i].append(pair.spec(ids, c.k, max_tokens, c.draft, trees=c.tree))
                tick(1, f"{where}: {c.draft.name}{' tree' if c.tree else ''} k={c.k}")
            if peer:
                ours.append(spec[shared][-1] if shared is not None else pair.spec(ids, peer.k, max_tokens, peer.draft))
                tick(1, f"{where}: {peer.label} k={peer.k} (ours, card schedule)")
                hf_greedy.append(hf_generate(pair, ids, max_tokens))
                tick(1, f"{where}: transformers greedy")
                hf_assisted.append(hf_generate(pair, ids, max_tokens, peer))
                tick(1, f"{where}: transformers assisted")
        reference = greedy[0].tokens
        greedy_s = pinned_s = statistics.median(g.stats.wall_s for g in greedy)
        free_s = statistics.median(g.stats.wall_s for g in free) if free else 0.0
        if free:
            greedy_s = min(pinned_s, free_s)
        for c, results in zip(configs, spec):
            s, rounds = results[0].stats, results[0].rounds
            # pinned: the reference is greedy at this configuration's own width (untimed unless the card's)
            same_as = reference if sampled or pair.width(c.k) == pair.width(pair.card.k) else pair.reference_at(ids, max_tokens, c.k)
            expected, steps = predict(rounds, s.alpha_by_position, c.draft_cost, profile.v, len(ids))
            yield BenchRow.from_run(
                prompt=prompt, config=c, result=results[0], greedy_wall_s=greedy_s,
                wall_s=statistics.median(x.stats.wall_s for x in results), baseline_tokens=len(reference),
                identical=None if sampled else all(x.tokens == same_as for x in results),
                predicted_tokens=expected, predicted_steps=steps, prefill_steps=profile.prefill(len(ids) - 1),
                shapes=pair.shapes, pinned_greedy_wall_s=pinned_s if free else 0.0, free_greedy_wall_s=free_s,
                greedy_form=pair.policy.form(1, pair.greedy_width(pair.card.k)), greedy_width=pair.greedy_width(pair.card.k),
                compiled=pair.policy.compiled, tree=c.tree)
        if peer:
            for mode, mine, theirs in (("greedy", greedy, hf_greedy), ("assisted", ours, hf_assisted)):
                yield PeerRow(scope="prompt", name=prompt.id, category=prompt.category, mode=mode,
                              draft=peer.label if mode == "assisted" else "", k=peer.k if mode == "assisted" else None,
                              prompts=1, tokens=len(mine[0].tokens), hf_tokens=len(theirs[0][0]),
                              wall_s=statistics.median(x.stats.wall_s for x in mine),
                              hf_wall_s=statistics.median(t[1] for t in theirs),
                              target_forwards=mine[0].stats.target_forwards, hf_target_forwards=theirs[0][2],
                              identical=all(t[0] == reference for t in theirs)
                              and all(m.tokens == reference for m in mine))


# ---------------------------------------------------------------------------- --batch N
def timed_pass(pair: Pair, encoded: list[list[int]], k: int, max_tokens: int, batch: int, draft=None,
               width: int | None = None) -> tuple[list[Result], float]:
    """One batched pass over every prompt (batch.run): results in input order, its wall time.
    Pinned shapes: at width k + 1 (a greedy pass: `width`, the card's k + 1 unless given)."""
    from specdec_cli.loop.batch import run as run_batch

    width = width or pair.width(k if draft is not None else pair.card.k)
    _sync(pair.device)
    start = time.perf_counter()
    results = [r for _, r in run_batch(pair, encoded, k, max_tokens, batch, draft, width)]
    _sync(pair.device)
    return results, time.perf_counter() - start


def run_batched(pair: Pair, prompts: list[Prompt], configs: list[Config], max_tokens: int, repeats: int,
                batch: int, progress: Progress | None = None, notes: list | None = None) -> Iterator[BenchRow]:
    """bench with --batch N: per repeat one timed batched pass of the target alone and one per
    configuration, over all prompts. A batch's time is shared, so a prompt row's wall_s is its
    pass's median wall time apportioned by tokens: category and overall rows (sums) are then the
    batch's throughput. Outputs are checked against each prompt's batch-1 greedy decode
    (computed untimed first), not against the batched greedy pass; each output that differs
    adds a line to `notes` with where and the target's top-2 margin there (fp32 near-ties can
    part a padded batch from batch 1)."""

    tick = progress or (lambda n, text: None)
    sampled = not pair.sampling.greedy
    encoded = [pair.encode(p.text, max_tokens) for p in prompts]
    if not encoded:
        return
    tick(0, "warm-up")
    warm = encoded[:batch]
    timed_pass(pair, warm, 0, min(max_tokens, WARMUP_TOKENS), batch)
    tick(0, "greedy references (untimed)")
    if pair.shapes == "pinned":  # the reference is the batched greedy pass at each configuration's width
        passes = {w: timed_pass(pair, encoded, 0, max_tokens, batch, width=w)[0] for w in {pair.width(c.k) for c in configs}}
        by_width = {w: [None if sampled else x.tokens for x in results] for w, results in passes.items()}
    else:  # free shapes: batch-1 greedy, the reference every other run is checked against
        by_width = {None: [None if sampled else pair.reference(ids, max_tokens) for ids in encoded]}
    for c in configs:
        timed_pass(pair, warm, c.k, min(max_tokens, WARMUP_TOKENS), batch, c.draft)
    tick(0, "probing verify and draft costs")
    profile = probe_costs(pair, configs)
    greedy, spec = [], [[] for _ in configs]
    for r in range(repeats):
        greedy.append(timed_pass(pair, encoded, 0, max_tokens, batch))
        tick(len(prompts), f"batch {batch} ({r + 1}/{repeats}): {'plain sampling' if sampled else 'greedy'}")
        for i, c in enumerate(configs):
            spec[i].append(timed_pass(pair, encoded, c.k, max_tokens, batch, c.draft))
            tick(len(prompts), f"batch {batch} ({r + 1}/{repeats}): {c.draft.name} k={c.k}")
    greedy_s = statistics.median(wall for _, wall in greedy)
    greedy_tokens = sum(len(x.tokens) for x in greedy[0][0]) or 1
    for c, passes in zip(configs, spec):
        references = by_width[pair.width(c.k)]
        wall = statistics.median(w for _, w in passes)
        total = sum(len(x.tokens) for x in passes[0][0]) or 1
        for j, (prompt, ids) in enumerate(zip(prompts, encoded)):
            result, base = passes[0][0][j], greedy[0][0][j]
            s, rounds = result.stats, result.rounds
            expected, _ = predict(rounds, s.alpha_by_position, c.draft_cost, profile.v, len(ids))
            steps = 0.0  # the profile prices batch-1 forwards: no speedup is predicted for a batch
            same = None if sampled else all(p[0][j].tokens == references[j] for p in passes)
            if same is False and notes is not None:
                d = first_divergence(pair, ids, references[j], next(p[0][j].tokens for p in passes
                                                                    if p[0][j].tokens != references[j]))
                notes.append(f"prompt {prompt.id}, {c.draft.name} k={c.k}: batch {batch} differs from greedy "
                             f"at token {d['index']} ({d['greedy_token']} vs {d['spec_token']}; "
                             f"target top-2 margin {d['margin']:.4g})")
            yield BenchRow.from_run(
                prompt=prompt, config=c, result=result, greedy_wall_s=greedy_s * len(base.tokens) / greedy_tokens,
                wall_s=wall * s.tokens / total, baseline_tokens=len(base.tokens), identical=same,
                predicted_tokens=expected, predicted_steps=steps, shapes=pair.shapes, compiled=pair.policy.compiled)

