"""Timed comparisons: plain greedy vs speculative decoding of the same prompts in one run, the
agreement and k sweeps beside the theory, and transformers' own `generate` as a peer.

Measurement only: `run()` yields rows of plain numbers as they complete (one per prompt and
configuration), so an interrupted run can still show what it finished; `summarize()` folds
them into category and overall rows. Tables, CSV, JSON and plots live in render.py / plot.py.

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
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable, Iterator

import torch

from .cards import Card, DraftSpec
from .decoding import Result
from .costs import CostProfile, _sync
from .drafts import Draft, get as draft_kind
from .errors import SpecdecError
from .kernels import WeightMajor
from .metrics import expected_speedup, expected_tokens_per_round, predict
from .models import HFLM
from .pair import Pair, build_draft, first_divergence, innermost
from .prompts import Prompt
from .schedule import Scheduled

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

    def begin(self, prompt: list[int]) -> None:
        self.draft.begin(prompt)

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        proposal = self.draft.propose(tokens, k)
        if k:
            time.sleep(self.cost * self.step_s * k)
        return proposal

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        self.draft.update(tokens, accepted, new)


@dataclass
class Config:
    """One speculative configuration to time: a draft at a k."""

    draft: Draft
    k: int
    agree: float | None = None  # the synthetic draft's agreement; None = the card's own draft
    verify_cost: float = 0.0  # v: one (k+1)-token target forward / one 1-token step (probed)
    draft_cost: float = 0.0  # c: one draft step / one target step (probed, or simulated)
    simulated: bool = False  # draft_cost is --draft-cost, not a measurement


def plan(pair: Pair, ks: list[int], agrees: list[float] | None, seed: int = 0,
         draft_cost: float | None = None) -> list[Config]:
    """The configurations of a run: the synthetic draft at every (agreement, k) when sweeping
    agreement, then the card's own draft at every k (the extra row at its measured rate)."""
    configs = []
    for a in agrees or []:
        for k in ks:
            draft = build_draft(DraftSpec("synthetic", agree=a, seed=seed, schedule="fixed"), pair)
            if draft_cost is not None:
                draft = SimulatedCost(draft, draft_cost)
            configs.append(Config(draft, k, agree=a, draft_cost=draft_cost or 0.0, simulated=draft_cost is not None))
    configs += [Config(pair.draft, k) for k in ks]
    return configs


# ---------------------------------------------------------------------------- rows
@dataclass
class Row:
    """One configuration over some prompts: one prompt, a category, or all of them (`scope`)."""

    scope: str  # prompt | category | all
    name: str  # the prompt id, the category, or "all"
    category: str
    draft: str
    k: int
    agree: float | None  # synthetic agreement; None for the card's own draft
    prompts: int
    tokens: int
    verify_rounds: int
    target_forwards: int
    draft_forwards: int
    drafted: int
    accepted: int
    rejected_rounds: int  # rounds that ended at a mismatch
    greedy_wall_s: float  # median over repeats, summed over prompts
    wall_s: float
    baseline_tokens: int  # tokens of the target-alone run (= tokens for greedy; may differ when sampling)
    identical: bool | None  # every speculative output equals its greedy one (None: sampling)
    verify_cost: float
    draft_cost: float
    draft_cost_simulated: bool
    predicted_tokens: float = 0.0  # the cost model's expected tokens for the rounds actually run
    predicted_steps: float = 0.0  # and their cost in 1-token target steps (metrics.predict)
    prefill_steps: float = 0.0  # the prompt's prefill in target steps: greedy and speculative both pay it
    shapes: str = "free"  # the forward shapes this run took (kernels.ForwardPolicy)
    pinned_greedy_wall_s: float = 0.0  # pinned shapes: greedy at the same width (the exactness reference)...
    free_greedy_wall_s: float = 0.0  # ...and free-shape greedy (what a user would otherwise run); 0: not timed
    greedy_form: str = "linear"  # the matmul form the greedy steps took (kernels.py)

    @property
    def baseline(self) -> str:
        """Which greedy the speedup is against: the faster of the two when both were timed."""
        if not self.pinned_greedy_wall_s:
            return "greedy"
        return "pinned greedy" if self.pinned_greedy_wall_s < self.free_greedy_wall_s else "free greedy"

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def agreement_est(self) -> float | None:
        """Per-token agreement estimated from the rounds: each checked position is accepted
        with probability a, and a round stops at its first mismatch, so a ~ accepted /
        (accepted + rejected rounds). Unlike accept_rate it does not fall with k."""
        seen = self.accepted + self.rejected_rounds
        return self.accepted / seen if seen else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.tokens / self.verify_rounds if self.verify_rounds else None

    @property
    def greedy_tokens_per_s(self) -> float | None:
        return self.baseline_tokens / self.greedy_wall_s if self.greedy_wall_s > 0 else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.wall_s if self.wall_s > 0 else None

    @property
    def speedup(self) -> float | None:
        """Speculative tok/s over the baseline's: greedy time / speculative time for the same
        tokens; per token when sampling, where the two runs may stop at different lengths."""
        ours, base = self.tokens_per_s, self.greedy_tokens_per_s
        return ours / base if ours and base else None

    @property
    def predicted_tokens_per_round(self) -> float | None:
        """Expected tokens/round from the measured per-position acceptance and the proposal
        lengths actually chosen (a prediction: chance can beat it)."""
        return self.predicted_tokens / self.verify_rounds if self.verify_rounds else None

    @property
    def predicted_speedup(self) -> float | None:
        """The cost model's speedup for those rounds: expected tokens / their cost in target
        steps (greedy costs one step a token), the prompt's prefill added to both sides (both
        runs pay it; it is most of an 8-token answer's time). Measured beside it, it tests the
        cost model."""
        steps = self.predicted_steps + self.prefill_steps
        return (self.predicted_tokens + self.prefill_steps) / steps if self.predicted_steps > 0 else None

    @property
    def theory_tokens_per_round(self) -> float | None:
        """Leviathan et al. at the synthetic draft's set agreement, k proposals every round."""
        return None if self.agree is None else expected_tokens_per_round(self.agree, self.k)

    @property
    def theory_speedup(self) -> float | None:
        if self.agree is None or self.verify_cost <= 0:
            return None
        return expected_speedup(self.agree, self.k, self.draft_cost, verify=self.verify_cost)

    def as_dict(self) -> dict:
        return {"row": "bench", **asdict(self), **{name: getattr(self, name) for name in (
            "baseline", "accept_rate", "agreement_est", "tokens_per_round", "greedy_tokens_per_s", "tokens_per_s",
            "speedup", "predicted_tokens_per_round", "predicted_speedup", "theory_tokens_per_round",
            "theory_speedup")}}


@dataclass
class PeerRow:
    """specdec vs transformers' own generate on the same prompts, in the same process."""

    scope: str
    name: str
    category: str
    mode: str  # greedy | assisted
    draft: str  # the draft both sides use ("" for greedy)
    k: int | None
    prompts: int
    tokens: int  # ours
    hf_tokens: int
    wall_s: float  # ours, median over repeats, summed over prompts
    hf_wall_s: float
    target_forwards: int
    hf_target_forwards: int
    identical: bool  # transformers' output == ours == the greedy reference

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.wall_s if self.wall_s > 0 else None

    @property
    def hf_tokens_per_s(self) -> float | None:
        return self.hf_tokens / self.hf_wall_s if self.hf_wall_s > 0 else None

    @property
    def ratio(self) -> float | None:
        """specdec tok/s over transformers tok/s (> 1: specdec is faster)."""
        ours, theirs = self.tokens_per_s, self.hf_tokens_per_s
        return ours / theirs if ours and theirs else None

    def as_dict(self) -> dict:
        return {"row": "transformers", **asdict(self), "tokens_per_s": self.tokens_per_s,
                "hf_tokens_per_s": self.hf_tokens_per_s, "ratio": self.ratio}


_SUMMED = ("prompts", "tokens", "baseline_tokens", "verify_rounds", "target_forwards", "draft_forwards", "drafted", "accepted",
           "rejected_rounds", "greedy_wall_s", "wall_s", "hf_tokens", "hf_wall_s", "hf_target_forwards",
           "predicted_tokens", "predicted_steps", "prefill_steps", "pinned_greedy_wall_s", "free_greedy_wall_s")


def summarize(rows: list) -> list:
    """Per-prompt rows -> one row per configuration and category, then per configuration over
    all prompts (counts and median wall times summed: a time-weighted aggregate)."""
    groups: dict = {}
    for row in rows:
        if row.scope != "prompt":
            continue
        key = (type(row), row.draft, row.k, getattr(row, "agree", None), getattr(row, "mode", None))
        for scope, name in (("category", row.category), ("all", "all")):
            groups.setdefault((key, scope, name), []).append(row)
    out = []
    for (_, scope, name), members in sorted(groups.items(), key=lambda item: item[0][1] == "all"):
        first = members[0]
        values = {f.name: getattr(first, f.name) for f in fields(first)}
        same = [m.identical for m in members]
        values.update(scope=scope, name=name, category=name if scope == "category" else "all",
                      identical=None if None in same else all(same))
        for f in _SUMMED:
            if f in values:
                values[f] = sum(getattr(m, f) for m in members)
        if values.get("pinned_greedy_wall_s"):  # the faster greedy over these prompts
            values["greedy_wall_s"] = min(values["pinned_greedy_wall_s"], values["free_greedy_wall_s"])
        out.append(type(first)(**values))
    return out


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


# ---------------------------------------------------------------------------- transformers
@dataclass
class Peer:
    """The card's draft as transformers' assisted generation runs it (fixed k), beside ours (the card's schedule)."""

    draft: Draft  # ours: the card's draft under the card's schedule (transformers': fixed k)
    k: int
    label: str
    kwargs: dict  # for generate()
    assistant: object  # the model whose generation_config carries the fixed-k settings (or None)


def check_peer(card: Card) -> None:
    """Whether transformers can run this card's pair (checked before loading anything): the
    draft's kind says whether transformers has it (drafts/)."""
    if card.target == "toy":
        raise SpecdecError(f"--vs-transformers: needs a transformers target; card '{card.name}' has target 'toy'")
    draft_kind(card.draft.kind).check_peer(card.draft, card)


def transformers_peer(pair: Pair, k: int) -> Peer:
    """How transformers runs the card's draft. Fixed k: `num_assistant_tokens`, schedule
    `constant` and confidence threshold 0 go on the assistant's generation config, because
    generate() ignores them as arguments (transformers #40739)."""
    check_peer(pair.card)
    spec, card = pair.card.draft, pair.card
    if not isinstance(pair.target, HFLM):
        raise SpecdecError(f"--vs-transformers: needs a transformers target; card '{card.name}' has target '{card.target}'")
    ours = pair.draft  # with the card's schedule: what a specdec user runs
    inner = ours.draft if isinstance(ours, Scheduled) else ours
    kwargs, assistant = draft_kind(spec.kind).peer(spec, pair, inner, k)
    return Peer(ours, k, spec.label(), kwargs, assistant)


@contextmanager
def _fixed_k(model, k: int):
    if model is None:
        yield
        return
    config = model.generation_config
    saved = {n: getattr(config, n, None) for n in
             ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = k, "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@torch.inference_mode()
def hf_generate(pair: Pair, ids: list[int], max_tokens: int, peer: Peer | None = None) -> tuple[list[int], float, int]:
    """transformers' generate: greedy, or assisted with the peer's draft. Returns the new
    tokens, the wall time and the target's full-depth forwards (verify steps + prefill)."""
    model = pair.target.model
    base = getattr(model, model.base_model_prefix, model)
    full = getattr(base.config, "num_hidden_layers", None)
    calls = [0]

    def count(*_):  # early exit runs the same module at reduced depth: count full-depth calls
        calls[0] += getattr(base.config, "num_hidden_layers", None) == full

    x = torch.tensor([ids], device=pair.device)
    pad = model.generation_config.pad_token_id
    kwargs = dict(attention_mask=torch.ones_like(x), max_new_tokens=max_tokens, do_sample=False, num_beams=1,
                  pad_token_id=pad if pad is not None else min(pair.eos, default=0))
    handle = model.register_forward_hook(count)
    switch = pair.target.weight_major or WeightMajor()  # transformers as it comes: F.linear at every width
    widths, switch.widths, rectangles, switch.rectangles = switch.widths, frozenset(), switch.rectangles, frozenset()
    try:
        with _fixed_k(peer.assistant if peer else None, peer.k if peer else 0):
            _sync(pair.device)
            start = time.perf_counter()
            out = model.generate(x, **kwargs, **(peer.kwargs if peer else {}))
            _sync(pair.device)
            wall = time.perf_counter() - start
    finally:
        handle.remove()
        switch.widths, switch.rectangles = widths, rectangles
    return out[0, len(ids):].tolist(), wall, calls[0]


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
        peer: Peer | None = None, progress: Progress | None = None) -> Iterator[Row | PeerRow]:
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
        pair.spec(encoded[0], c.k, short, c.draft)
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
                tick(0, f"{where}: free-shape greedy")
            for i, c in enumerate(configs):
                spec[i].append(pair.spec(ids, c.k, max_tokens, c.draft))
                tick(1, f"{where}: {c.draft.name} k={c.k}")
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
            yield Row("prompt", prompt.id, prompt.category, c.draft.name, c.k, c.agree, 1, s.tokens,
                      s.verify_rounds, s.target_forwards, s.draft_forwards, s.drafted, s.accepted,
                      sum(x.accepted < x.drafted for x in rounds), greedy_s,
                      statistics.median(x.stats.wall_s for x in results), len(reference),
                      None if sampled else all(x.tokens == same_as for x in results),
                      c.verify_cost, c.draft_cost, c.simulated, expected, steps, profile.prefill(len(ids) - 1),
                      pair.shapes, pinned_s if free else 0.0, free_s,
                      pair.policy.form(1, pair.width(pair.card.k) or 1))
        if peer:
            for mode, mine, theirs in (("greedy", greedy, hf_greedy), ("assisted", ours, hf_assisted)):
                yield PeerRow("prompt", prompt.id, prompt.category, mode, peer.label if mode == "assisted" else "",
                              peer.k if mode == "assisted" else None, 1, len(mine[0].tokens), len(theirs[0][0]),
                              statistics.median(x.stats.wall_s for x in mine),
                              statistics.median(t[1] for t in theirs), mine[0].stats.target_forwards, theirs[0][2],
                              all(t[0] == reference for t in theirs) and all(m.tokens == reference for m in mine))


# ---------------------------------------------------------------------------- --batch N
def timed_pass(pair: Pair, encoded: list[list[int]], k: int, max_tokens: int, batch: int, draft=None,
               width: int | None = None) -> tuple[list[Result], float]:
    """One batched pass over every prompt (batch.run): results in input order, its wall time.
    Pinned shapes: at width k + 1 (a greedy pass: `width`, the card's k + 1 unless given)."""
    from .batch import run as run_batch

    width = width or pair.width(k if draft is not None else pair.card.k)
    _sync(pair.device)
    start = time.perf_counter()
    results = [r for _, r in run_batch(pair, encoded, k, max_tokens, batch, draft, width)]
    _sync(pair.device)
    return results, time.perf_counter() - start


def run_batched(pair: Pair, prompts: list[Prompt], configs: list[Config], max_tokens: int, repeats: int,
                batch: int, progress: Progress | None = None, notes: list | None = None) -> Iterator[Row]:
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
            yield Row("prompt", prompt.id, prompt.category, c.draft.name, c.k, c.agree, 1, s.tokens,
                      s.verify_rounds, s.target_forwards, s.draft_forwards, s.drafted, s.accepted,
                      sum(x.accepted < x.drafted for x in rounds), greedy_s * len(base.tokens) / greedy_tokens,
                      wall * s.tokens / total, len(base.tokens), same, c.verify_cost, c.draft_cost,
                      c.simulated, expected, steps, shapes=pair.shapes)

