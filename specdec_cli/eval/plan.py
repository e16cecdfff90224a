"""`specdec plan`: predict, before timing anything, what each draft × k × schedule will gain.

For every prompt the target's own greedy continuation is computed once. Then each
configuration is *replayed*: the real decode loop runs with the real draft and schedule, but
the target is a `ReplayTarget` that answers every verify from that continuation instead of a
forward pass. So the rounds (proposal lengths, accepted counts) are exactly the ones a real run
makes — the loop is deterministic under greedy — and cost nothing but the draft's own work.
The cost profile (costs.py) then prices those rounds:

    predicted speedup = (P + Σ_rounds E[d]) / (P + Σ_rounds (d·c + v(d+1)))   (greedy: 1 step per token)

with P the prompts' prefills (costs.CostProfile.prefill), which both runs pay, E[d] from the teacher-forced per-position acceptance (metrics.predict). A plain greedy
row (speedup 1) is always a candidate, so "speculate" is recommended only when it pays.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from specdec_cli.cards.card import MAX_K, SCHEDULES, DraftSpec
from specdec_cli.engine.costs import CostProfile
from specdec_cli.engine.trees import layout
from specdec_cli.loop.decoding import decode
from specdec_cli.loop.metrics import Stats, predict
from specdec_cli.pair.loading import Pair, build_draft, innermost
from specdec_cli.cards.prompts import Prompt


class ReplayCache:
    """A cache that only counts positions (crop(-n) drops the last n)."""

    def __init__(self):
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, n: int) -> None:
        if n < 0:
            self.length += n


class ReplayTarget:
    """Answers the loop's forwards from a known greedy continuation: the logits after position
    j put all their mass on sequence[j + 1]. Valid because the loop only ever feeds a prefix
    of that sequence (it is exact). Past the end it answers token 0 (the loop has stopped by
    then: the continuation ends at EOS or max_tokens).

    A forward asked for `features` (a features draft reads them) answers with slices of one real
    teacher-forced forward over the whole sequence, made on first ask."""

    replayed = True  # its forwards cost nothing: the loop reports no verify times to the schedule
    trees = True  # a tree's slot s is answered at position start + depth(s) (forward)

    def __init__(self, real, sequence: list[int]):
        self.real, self.sequence = real, sequence
        self.device, self.vocab_size = real.device, real.vocab_size
        self.max_positions = real.max_positions
        pad = [0] * (MAX_K + 1)  # proposals may run past the continuation's EOS; the loop stops there
        self.next = torch.tensor(sequence[1:] + pad, device=real.device)  # the token after each position
        self.hidden = {}  # taps -> [L, T * H]: the real target's features of the whole sequence, when first asked

    def new_cache(self) -> ReplayCache:
        return ReplayCache()

    def forward(self, ids: torch.Tensor, cache: ReplayCache, keep: int = 0, features: tuple[int, ...] = (),
                tree: tuple[int, ...] | None = None):
        """As HFLM.forward: logits [S, V], with `features` (taps) (logits, features [S, T * H]). `tree`: the
        slots' parents (engine/trees.py); slot s is answered at position start + depth(s). Only
        slots whose path is the continuation's are right, and only they are ever read: the loop
        keeps the longest path the target agrees with, and the target agrees with nothing else."""
        start, width = cache.length, ids.shape[1]
        cache.length += width
        depth = layout([tree], width)[0][0] if tree else torch.arange(width)
        at = (start + depth)[-keep:] if keep else start + depth  # [S] positions
        logits = torch.zeros(len(at), self.vocab_size, device=self.device)  # [S, V]
        logits[torch.arange(len(at)), self.next[at.to(self.next.device)]] = 1.0
        if not features:
            return logits
        if features not in self.hidden:
            sequence = torch.tensor([self.sequence], device=self.device)
            self.hidden[features] = self.real.forward(sequence, self.real.new_cache(), keep=1, features=features)[1]
        hidden = self.hidden[features]
        past = len(hidden) - 1  # positions past the continuation (after its end) are never read
        return logits, hidden[at.clamp(max=past).to(hidden.device)]


@dataclass
class PlanRow:
    draft: str
    k: int
    schedule: str
    prompts: int = 0
    tokens: int = 0
    verify_rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    predicted_steps: float = 0.0  # the rounds' cost in 1-token target steps (free shapes: a round costs v(d+1))
    pinned_steps: float = 0.0  # the same rounds under pinned shapes: every round costs v(k+1), whatever d
    prefill_steps: float = 0.0  # the prompts' prefills, paid alike by greedy and speculative runs
    draft_cost: float = 0.0
    accepted_at: list[int] = field(default_factory=list)
    reached_at: list[int] = field(default_factory=list)
    recommended: bool = False
    tree: bool = False  # the draft proposes token trees of k nodes (engine/trees.py), not chains

    @property
    def label(self) -> str:
        return f"{self.draft} tree" if self.tree else self.draft

    def add(self, stats: Stats) -> None:
        self.prompts += 1
        self.tokens += stats.tokens
        self.verify_rounds += stats.verify_rounds
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        grow = len(stats.reached_at) - len(self.reached_at)
        self.accepted_at += [0] * max(grow, 0)
        self.reached_at += [0] * max(grow, 0)
        for i, (a, r) in enumerate(zip(stats.accepted_at, stats.reached_at)):
            self.accepted_at[i] += a
            self.reached_at[i] += r

    @property
    def alpha_by_position(self) -> list[float]:
        """Teacher-forced α_j: proposal j accepted, given 1..j-1 were, along the continuations."""
        return [a / r if r else 0.0 for a, r in zip(self.accepted_at, self.reached_at)]

    @property
    def predicted_tokens_per_round(self) -> float | None:
        return self.tokens / self.verify_rounds if self.verify_rounds else None

    @property
    def predicted_speedup(self) -> float | None:
        """The replayed rounds are the real ones, so only their price is predicted (greedy: a step
        a token); both sides pay the prompts' prefills."""
        steps = self.predicted_steps + self.prefill_steps
        return (self.tokens + self.prefill_steps) / steps if self.predicted_steps > 0 else None

    @property
    def pinned_speedup(self) -> float | None:
        """The same rounds with pinned shapes (bitwise-exact in any dtype), against free-shape
        greedy, the faster plain decode (a pinned greedy step costs v(k+1), not 1)."""
        steps = self.pinned_steps + self.prefill_steps
        return (self.tokens + self.prefill_steps) / steps if self.pinned_steps > 0 else None

    def as_dict(self) -> dict:
        return {"draft": self.draft, "tree": self.tree, "k": self.k, "schedule": self.schedule, "prompts": self.prompts,
                "tokens": self.tokens, "verify_rounds": self.verify_rounds, "drafted": self.drafted,
                "accepted": self.accepted, "draft_cost": self.draft_cost,
                "alpha_by_position": [round(a, 4) for a in self.alpha_by_position],
                "predicted_tokens_per_round": self.predicted_tokens_per_round,
                "predicted_speedup": self.predicted_speedup, "pinned_speedup": self.pinned_speedup,
                "recommended": self.recommended}


def configurations(specs: list[DraftSpec], ks: list[int], schedules: list[str]) -> list[tuple[DraftSpec, int]]:
    """Every draft × k × schedule; a draft's own schedule is replaced by each one asked for."""
    return [(replace(spec, schedule=s), k) for spec in specs for k in ks for s in schedules]


def plan(pair: Pair, prompts: list[Prompt], specs: list[DraftSpec], ks: list[int], max_tokens: int,
         schedules: list[str] = list(SCHEDULES), progress=None, trees: bool = False) -> tuple[list[PlanRow], CostProfile]:
    """Predicted tokens/round and speedup for each configuration (plus plain greedy), the best
    one marked `recommended`. `trees`: a draft that can propose token trees is also replayed
    proposing them (a row beside its chain row; its own draft object, so schedules learn apart)."""
    tick = progress or (lambda text: None)
    configs = []  # (spec, k, draft, tree)
    for spec, k in configurations(specs, ks, schedules):
        draft = build_draft(spec, pair)
        configs.append((spec, k, draft, False))
        if trees and draft.trees:
            configs.append((spec, k, build_draft(spec, pair), True))
    profile = pair.cost_profile(tuple(d for _, _, d, _ in configs), max(ks) + 1)
    rows = [PlanRow("none (plain greedy)", 0, "-")]
    for spec, k, draft, tree in configs:
        rows.append(PlanRow(replace(spec, schedule="fixed").label(), k, spec.schedule,
                            draft_cost=profile.c(innermost(draft).name), tree=tree))
    for i, prompt in enumerate(prompts, 1):
        tick(f"{prompt.id}: the target's greedy continuation ({i}/{len(prompts)})")
        ids = pair.encode(prompt.text, max_tokens, tuple(d for _, _, d, _ in configs))
        reference = pair.reference(ids, max_tokens)
        replay = ReplayTarget(pair.target, ids + reference)
        rows[0].add(Stats(tokens=len(reference), verify_rounds=len(reference)))
        rows[0].predicted_steps += sum(profile.run_v(1, len(ids) + j) for j in range(len(reference)))
        rows[0].pinned_steps = rows[0].predicted_steps  # plain greedy: free shapes, the faster plain decode
        prefill = profile.prefill(len(ids) - 1)
        rows[0].prefill_steps += prefill
        tick(f"{prompt.id}: replaying {len(configs)} configurations ({i}/{len(prompts)})")
        for row, (spec, k, draft, tree) in zip(rows[1:], configs):
            result = decode(replay, draft, ids, k, max_tokens, pair.eos, trees=tree)
            if result.tokens != reference:  # cannot happen: the loop is exact whatever the draft
                raise AssertionError(f"replay of {draft.name} diverged on {prompt.id}")
            row.add(result.stats)
            row.predicted_steps += predict(result.rounds, [], row.draft_cost, profile.run_v, len(ids))[1]
            row.pinned_steps += predict(result.rounds, [], row.draft_cost, lambda n, at: profile.v(k + 1, at), len(ids))[1]
            row.prefill_steps += prefill
    max(rows, key=lambda r: (r.predicted_speedup or 0, r is rows[0])).recommended = True
    return rows, profile
