"""Schedules: how many tokens the draft proposes each round (d in 0..k; 0 = a plain step).

A schedule never touches exactness (the loop verifies whatever is proposed); it only decides
how many target steps the same output costs. `Scheduled` wraps any draft with one:
    fixed      d = k every round
    heuristic  transformers' num_assistant_tokens_schedule: +2 after a full accept, -1 after a
               miss, kept within 1..k
    cost       d = argmax_d E[d] / (d·c + v(d+1)) with the measured cost profile (costs.py) and
               per-position acceptance learned online (Leviathan et al. 2023's expected length,
               with per-position rates instead of one); for a token tree of d nodes, E[d] from
               acceptance learned by depth and rank (ranks.py)
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Callable

import torch

from specdec_cli.engine.trees import depths
from specdec_cli.loop.ranks import Ranks


class Fixed:
    name = "fixed"

    def begin(self) -> None:
        pass

    def length(self, key: int, k: int, context: int, tree: bool = False) -> int:
        return k

    def observe_verify(self, width: int, seconds: float, context: int) -> None:
        pass  # only the cost schedule learns what verifies cost

    def observe(self, key: int, drafted: int, accepted: int, tree: tuple | None = None) -> None:
        pass


class Heuristic:
    """+2 after a round where every proposal was accepted, -1 (to at least 1) otherwise. The
    limit is clamped to k: a long streak must not leave it far above what is ever proposed,
    or a run of misses would take as many rounds to bring it down."""

    name = "heuristic"

    def __init__(self, start: int = 2):
        self.start = start

    def begin(self) -> None:
        self.limit, self.cap = self.start, 1

    def length(self, key: int, k: int, context: int, tree: bool = False) -> int:
        self.cap = max(self.cap, k)  # the request's k (rounds near max_tokens ask for less)
        self.limit = min(self.limit, self.cap)
        return min(k, self.limit)

    def observe_verify(self, width: int, seconds: float, context: int) -> None:
        pass  # only the cost schedule learns what verifies cost

    def observe(self, key: int, drafted: int, accepted: int, tree: tuple | None = None) -> None:
        self.limit = min(self.limit + 2, self.cap) if accepted == drafted else max(1, self.limit - 1)


class Acceptance:
    """Per-position acceptance α_1..α_K for one context key, learned online: α_j is the chance
    proposal j survives given 1..j-1 did. Beta(prior) pseudo-counts plus observed counts that
    decay by `decay` per observation, so the estimate follows a request that changes character
    (a copied passage, then free text) and a poor start is forgiven."""

    def __init__(self, prior: float, weight: float = 2.0, decay: float = 0.97):
        self.prior, self.weight, self.decay = prior, weight, decay
        self.reached: list[float] = []  # per position: rounds where it was proposed after a clean run
        self.kept: list[float] = []  # of those, rounds where it was accepted

    def alpha(self, j: int) -> float:
        """α_j (1-based)."""
        return self.alphas(j)[-1]

    def alphas(self, k: int) -> list[float]:
        """α_1..α_k. α_j's prior is α_{j-1} (α_1's is the draft's prior): a position the draft
        has rarely reached borrows from the one before, so a draft that is right at 1..j-1
        gets to try j (and the schedule learns it) instead of stopping at an untested prior."""
        out, prior = [], self.prior
        for j in range(k):  # alpha(j) for 1..k in one pass
            reached = self.reached[j] if j < len(self.reached) else 0.0
            kept = self.kept[j] if j < len(self.kept) else 0.0
            prior = (kept + prior * self.weight) / (reached + self.weight)
            out.append(prior)
        return out

    def observe(self, drafted: int, accepted: int) -> None:
        grow = drafted - len(self.reached)
        if grow > 0:
            self.reached += [0.0] * grow
            self.kept += [0.0] * grow
        self.reached = [x * self.decay for x in self.reached]
        self.kept = [x * self.decay for x in self.kept]
        for j in range(min(drafted, accepted + 1)):  # positions 1..accepted+1 were judged
            self.reached[j] += 1
            self.kept[j] += j < accepted


def expected_tokens(alphas: list[float]) -> float:
    """E[d] = 1 + α_1 + α_1·α_2 + … + α_1·…·α_d: tokens a round emits (the +1 is the target's)."""
    total, run = 1.0, 1.0
    for a in alphas:
        run *= a
        total += run
    return total


def best_length(alphas: list[float], k: int, c: float, v: Callable[[int], float]) -> tuple[int, float]:
    """(d, gain) maximising gain(d) = E[d] / (d·c + v(d+1)) over d = 0..k; d = 0 (a plain step,
    gain 1/v(1) = 1) wins ties, so speculation has to pay to be chosen."""
    best, best_gain, run, total = 0, 1.0 / v(1), 1.0, 1.0
    for d in range(1, k + 1):
        run *= alphas[d - 1]
        total += run
        gain = total / (d * c + v(d + 1))
        if gain > best_gain * (1 + 1e-9):
            best, best_gain = d, gain
    return best, best_gain


def best_tree(ranks: Ranks, k: int, c: float, v: Callable[[int], float]) -> tuple[int, float]:
    """(d, gain) as best_length, for a token tree of d nodes: gain(d) = ranks.expected(d) /
    (d·c + v(d+1)), the best tree of d nodes under the acceptance learned by depth and rank."""
    best, best_gain = 0, 1.0 / v(1)
    for d in range(1, k + 1):
        gain = ranks.expected(d) / (d * c + v(d + 1))
        if gain > best_gain * (1 + 1e-9):
            best, best_gain = d, gain
    return best, best_gain


def batch_length(outlooks: list[list[float]], c: float, v: Callable[[int], float]) -> int:
    """A batch's d: the target verifies one rectangle [B, d+1], so each row proposes up to d and
    the round is worth Σ_i E_i[min(d, k_i)] tokens for Σ_i min(d, k_i)·c + v_B(d+1) batch steps
    (v_B in steps of the whole batch; outlooks[i] = row i's α_1..α_{k_i}). d = 0, a plain
    batched step worth B tokens for v_B(1) = 1, wins ties: speculation has to pay for the
    batch, not for the one row that would like it."""
    rows = len(outlooks)
    best, best_gain = 0, rows / v(1)
    for d in range(1, max(map(len, outlooks), default=0) + 1):
        tokens = sum(expected_tokens(a[:d]) for a in outlooks)
        gain = tokens / (sum(min(d, len(a)) for a in outlooks) * c + v(d + 1))
        if gain > best_gain * (1 + 1e-9):
            best, best_gain = d, gain
    return best


class Cost:
    """d = argmax over 0..k of E[d] / (d·c + v(d+1)): expected emitted tokens per unit time,
    both in 1-token target steps measured on this machine (costs.CostProfile). Acceptance is
    learned per context key (prompt lookup: the matched n-gram length, since a 3-gram match
    predicts more than a 1-gram one) from every round's outcome.

    A draft that costs a model call learns nothing in the rounds it is skipped, so a prior that
    is too pessimistic would never be corrected (a 0.5B draft agreeing 90 % with its 1.5B
    target, never tried). With `explore`, after `patience` skipped rounds in a row the schedule
    probes: it proposes the length that would pay if the draft were always right. A probe that
    did not pay for itself (fewer tokens than the target steps it cost) doubles the patience (a
    useless draft costs O(log n) probes); one that paid makes the next skipped round probe
    again, so a good draft behind a pessimistic estimate is back within a round or two (the
    Qwen pair used to wait 16 rounds after a fully accepted probe). A round drafted on the
    evidence resets the patience. A request's first round is a probe too when the prior would
    draft less: the Qwen pair's 0.6 prior used to open every request with d = 1, 1, 1, 3, 3, 3
    before reaching k = 4. Free drafts (prompt lookup) need no probes: `Scheduled`
    peeks at their first token instead."""

    name = "cost"
    SEEN = 9  # verify times kept per width (the median of the last SEEN is what the loop pays)
    TRUST = 3  # times seen before the loop's median may overrule the profile...
    OFF_BY = 0.25  # ...and only where it is this far off (so a profile that is right decides alone)
    MIN_STEP_S = 0.01  # targets faster than this per step (toys) are not timed: timer noise would decide

    def __init__(self, profile: Callable[[int], object], draft_label: str, prior: Callable[[int], float],
                 explore: bool = False, pinned: bool = False):
        self._profile, self.draft_label, self.prior, self.explore = profile, draft_label, prior, explore
        self.pinned = pinned  # pinned shapes: every round is a [1, k+1] forward, so v(d+1) = v(k+1) for every d
        self.table: dict[int, Acceptance] = {}
        self.trees: dict[int, Ranks] = {}  # per context key: acceptance by depth and rank in trees
        self.seen: dict[int, deque] = {}  # width -> its last verify times relative to the profile's step (kept across requests)

    def observe_verify(self, width: int, seconds: float, context: int) -> None:
        """What a verify of `width` tokens took in the loop, relative to the profile's 1-token
        step at that context (so contexts mix). The profile is measured once and can be wrong
        where a width's time is bimodal from one call to the next (docs/cost-model.md has the
        case that found it): then the loop's own times correct it."""
        profile = self._profile(width)
        if profile.timed and profile.step_s >= self.MIN_STEP_S:
            self.seen.setdefault(width, deque(maxlen=self.SEEN)).append(seconds / profile.step(context))

    def v(self, profile, n: int, context: int) -> float:
        """v(n) in 1-token steps: the profile's, unless the loop has paid a width TRUST times or
        more and its median is OFF_BY or more away from the profile's (then the loop's)."""
        n = n if self.pinned else profile.width(n)  # free shapes: the width a forward of n tokens runs at
        model, seen = profile.v(n, context), self.seen.get(n)
        if not seen or len(seen) < self.TRUST:
            return model
        loop = statistics.median(seen)
        return loop if abs(loop - model) > self.OFF_BY * model else model

    def begin(self) -> None:
        self.table, self.trees = {}, {}  # per request: acceptance depends on the prompt
        self.probes = Probes()
        self.probe_price = None  # a probe round's cost in target steps, until its outcome is seen
        self.opened = False  # the request's first round has been decided

    def acceptance(self, key: int) -> Acceptance:
        if key not in self.table:
            self.table[key] = Acceptance(self.prior(key))
        return self.table[key]

    def ranks(self, key: int) -> Ranks:
        if key not in self.trees:
            self.trees[key] = Ranks(self.prior(key))
        return self.trees[key]

    def length(self, key: int, k: int, context: int, tree: bool = False) -> int:
        """d for the next round; `tree`: the round proposes a token tree of d nodes, priced by
        what the best tree of d nodes is worth under this key's acceptance by depth and rank."""
        self.probe_price = None  # a probe that proposed nothing taught nothing
        if k == 0:
            return 0
        profile = self._profile(k + 1)  # v(1..k+1), measured once per machine (cached)
        c, v = profile.c(self.draft_label), (lambda n: self.v(profile, k + 1 if self.pinned else n, context))
        d = (best_tree(self.ranks(key), k, c, v) if tree else best_length(self.acceptance(key).alphas(k), k, c, v))[0]
        opening, self.opened = not self.opened, True
        if not self.explore or not (self.probes.due(d) or opening):
            return d
        probe = best_length([1.0] * k, k, c, v)[0]  # a probe: 0 only if even a perfect draft cannot pay
        if probe <= d:
            return d
        self.probe_price = probe * c + v(probe + 1)
        return probe

    def observe(self, key: int, drafted: int, accepted: int, tree: tuple | None = None) -> None:
        """A round's outcome; `tree`: (parents, proposed tokens, kept tokens) of a tree round."""
        if drafted:
            self.acceptance(key).observe(drafted, accepted)
        if tree is not None:
            self.ranks(key).observe(*tree)
        if self.probe_price is not None:
            self.probes.outcome(accepted + 1 >= self.probe_price)
            self.probe_price = None


class Probes:
    """When to probe a draft the estimates say to skip (Cost, and batch.Lengths for a batch):
    after `patience` skipped rounds in a row. At a request's start the first skipped round
    probes at once (a draft the user chose is tried before a prior that is only a guess rules
    it out), and if that probe fails the next comes after PATIENCE skipped rounds, not
    2·PATIENCE: a chat reply's first token is where a draft most often parts from its target.
    A probe that paid for itself makes the next skipped round probe again; one that did not
    doubles the wait; a round drafted on the evidence resets it."""

    PATIENCE = 4

    def __init__(self):
        self.skipped, self.patience = self.PATIENCE - 1, self.PATIENCE // 2

    def due(self, decided: int) -> bool:
        """The estimates chose d = `decided`: should this round probe instead?"""
        if decided:
            self.skipped, self.patience = 0, self.PATIENCE
            return False
        self.skipped += 1
        if self.skipped < self.patience:
            return False
        self.skipped = 0
        return True

    def outcome(self, paid: bool) -> None:
        self.skipped, self.patience = (self.PATIENCE - 1, self.PATIENCE) if paid else (0, self.patience * 2)


def lookup_prior(key: int) -> float:
    """Prompt lookup before any evidence: a longer matched n-gram more likely continues (a guess,
    corrected within a few rounds; 0 = no match: nothing to propose anyway)."""
    return {0: 0.0, 1: 0.3, 2: 0.5}.get(key, 0.65)


class Scheduled:
    """A draft whose proposal length a schedule picks each round (the Draft protocol, wrapped).

    For a free draft (no model call: prompt lookup) a round the schedule skips still teaches it:
    the draft's first token is peeked at no cost and compared with the target's token."""

    def __init__(self, draft, schedule):
        self.draft, self.schedule = draft, schedule
        self.name = f"{draft.name}+{schedule.name}"
        # the draft's declared capabilities (loop/protocol.py)
        self.needs_reference, self.free, self.reads_features = draft.needs_reference, draft.free, draft.reads_features
        self.trees = draft.trees
        self.decided = None  # the next round's length when a batch decided it (decide)
        self.tree = None  # a tree round's (parents, proposed tokens) until update (propose_tree)

    @property
    def forwards(self) -> int:
        return self.draft.forwards

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        self.schedule.begin()
        self.round = None
        self.draft.begin(prompt, features)

    def _key(self, tokens: list[int], k: int) -> int:
        return self.draft.context_key(tokens, k)

    def decide(self, d: int) -> None:
        """The next round proposes (up to) d, chosen for a whole batch (batch.Lengths) from every
        row's outlook, instead of this row's schedule alone; the round's outcome still teaches it."""
        self.decided = d

    def outlook(self, tokens: list[int], k: int) -> list[float] | None:
        """α_1..α_k the cost schedule expects in this context (None for other schedules): what a
        batch weighs to choose one length for all its rows (schedule.batch_length)."""
        if not isinstance(self.schedule, Cost):
            return None
        return self.schedule.acceptance(self._key(tokens, k)).alphas(k) if k else []

    def _length(self, tokens: list[int], k: int, tree: bool = False) -> int:
        key = self._key(tokens, k)
        self.tree = None  # a tree round's (parents, proposed tokens), for the schedule to learn from
        if self.decided is None:
            d = self.schedule.length(key, k, len(tokens), tree)
        else:  # a batch chose the round's length for every row (decided for the batch's costs)
            d, self.decided = min(self.decided, k), None
        peek = self.draft.lookup(tokens, 1) if d == 0 and k and key and self.free else None
        self.round = (key, len(tokens), peek)
        return d

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        d = self._length(tokens, k)
        proposal = self.draft.propose(tokens, d)
        if d and not proposal.shape[0] and self.fills:
            proposal = self.draft.filler(tokens)
        self.drafted = proposal.shape[0]
        return proposal

    def propose_tree(self, tokens: list[int], k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """A tree of at most the schedule's d tokens, d priced as a tree (ranks.py). The schedule
        learns from its depth, the longest path it could have kept (the chain's acceptance by
        position), and from its shape, which ranks at which depths were kept (Ranks)."""
        d = self._length(tokens, k, tree=True)
        proposal, parents = self.draft.propose_tree(tokens, d)
        if d and not proposal.shape[0] and self.fills:
            proposal, parents = self.draft.filler(tokens), (0,)
        self.drafted = max(depths(parents))
        self.tree = (parents, proposal)
        return proposal, parents

    @property
    def fills(self) -> bool:
        """A free draft under the cost schedule that found nothing to propose (prompt lookup, no
        n-gram match) still proposes one token when the schedule asked for d >= 1: with α = 0
        (key 0's prior) the schedule asks only where the measured profile says a 2-token verify
        costs less than a 1-token step, v(2) < v(1) (on the CPUs we measured, 0.55-0.7 with
        weight-major matmuls, kernels.py). The filler is rarely right; the verify is cheaper.
        Exactness is untouched: it is verified like any proposal."""
        return self.free and isinstance(self.schedule, Cost) and self.draft.fills

    def propose_sampled(self, tokens: list[int], k: int, warp, generator):
        d = self._length(tokens, k)
        proposal, q = self.draft.propose_sampled(tokens, d, warp, generator)  # q None: a deterministic draft
        self.drafted = proposal.shape[0]
        return proposal, q

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        key, base, peek = self.round
        if self.drafted:  # a round with no proposal says nothing about the draft...
            learns = self.tree is not None and isinstance(self.schedule, Cost)  # only the cost schedule reads a tree's ranks
            tree = (self.tree[0], self.tree[1].tolist(), tokens[base : base + accepted]) if learns else None
            self.schedule.observe(key, self.drafted, accepted, tree)
        elif peek:  # ...unless we peeked: would its first token have been the target's?
            self.schedule.observe(key, 1, int(peek[0] == tokens[base]))
        self.draft.update(tokens, accepted, new, features)

    def observe_verify(self, width: int, seconds: float, context: int) -> None:
        self.schedule.observe_verify(width, seconds, context)

    def step_seconds(self, context: list[int]) -> float:
        return self.draft.step_seconds(context)


def AdaptiveK(draft, start: int = 2) -> Scheduled:  # noqa: N802 - the name users and tests know
    """transformers' heuristic schedule around any draft."""
    return Scheduled(draft, Heuristic(start))
