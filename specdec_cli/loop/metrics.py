"""Counting: plain numbers and derived properties. Rendering lives in render.py.

Conventions (as vLLM's spec-decode metrics): `tokens_per_round` includes the correction/bonus
token; a verify round is one target forward inside the loop (prefill is not a round).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Round:
    drafted: int  # tokens the draft proposed this round (a tree's nodes)
    accepted: int  # of those, how many the target agreed with (a leading run, a tree's kept path)
    emitted: int  # tokens appended: accepted + 1, trimmed at EOS / max_tokens
    depth: int | None = None  # a token tree's longest path (None: a chain, whose depth is drafted)

    @property
    def positions(self) -> int:
        """Draft positions judged this round (a chain's drafted, a tree's depth)."""
        return self.drafted if self.depth is None else self.depth


@dataclass
class Stats:
    tokens: int = 0  # tokens generated
    verify_rounds: int = 0  # target forwards inside the loop
    target_forwards: int = 0  # including prefill
    draft_forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)  # per draft position 1..k
    accepted_at: list[int] = field(default_factory=list)
    reached_at: list[int] = field(default_factory=list)  # proposed after every earlier one was accepted
    wall_s: float = 0.0  # decode time after loading, prefill included

    def observe(self, r: Round) -> None:
        self.verify_rounds += 1
        self.target_forwards += 1
        self.tokens += r.emitted
        self.drafted += r.drafted
        self.accepted += r.accepted
        grow = r.positions - len(self.drafted_at)
        if grow > 0:
            self.drafted_at += [0] * grow
            self.accepted_at += [0] * grow
            self.reached_at += [0] * grow
        for i in range(r.positions):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < r.accepted
            self.reached_at[i] += i <= r.accepted

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.tokens / self.verify_rounds if self.verify_rounds else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.wall_s if self.wall_s > 0 else None

    @property
    def accept_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def alpha_by_position(self) -> list[float]:
        """α_j: the chance proposal j is accepted given 1..j-1 were (what the cost model uses)."""
        return [a / r if r else 0.0 for a, r in zip(self.accepted_at, self.reached_at)]

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "verify_rounds": self.verify_rounds,
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "accept_rate": self.accept_rate,
            "tokens_per_round": self.tokens_per_round,
            "accept_by_position": self.accept_by_position,
            "alpha_by_position": self.alpha_by_position,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
        }


def speedup(greedy: Stats, spec: Stats) -> float | None:
    """Greedy wall time / speculative wall time (same prompt, machine and run)."""
    return greedy.wall_s / spec.wall_s if spec.wall_s > 0 else None


def predict(rounds: list[Round], alphas: list[float], c: float, v, context: int) -> tuple[float, float]:
    """The cost model's account of a run from the proposals it actually made: (expected tokens,
    cost in 1-token target steps), summed over rounds. A round proposing d tokens is expected
    to emit E[d] = 1 + α_1 + α_1·α_2 + … and to cost d·c + v(d+1) at its context length;
    greedy costs 1 step per token, so predicted speedup = tokens / steps."""
    tokens = steps = 0.0
    for r in rounds:
        run, expected = 1.0, 1.0
        for a in alphas[: r.positions]:  # along its positions (a tree: its depth)
            run *= a
            expected += run
        tokens += expected
        steps += r.drafted * c + v(r.drafted + 1, context)
        context += r.emitted
    return tokens, steps


def expected_tokens_per_round(a: float, k: int) -> float:
    """Leviathan et al. 2023: E[tokens per round] = (1 - a^(k+1)) / (1 - a)."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def expected_speedup(a: float, k: int, c: float, verify: float = 1.0) -> float:
    """Expected wall speedup when a draft step costs c target steps and a k+1-token verify
    costs `verify` target steps (1 in the paper): (1 - a^(k+1)) / ((1 - a)(k c + verify)).
    A prediction, not a bound: it assumes k proposals every round and i.i.d. agreement a."""
    return expected_tokens_per_round(a, k) / (k * c + verify)
