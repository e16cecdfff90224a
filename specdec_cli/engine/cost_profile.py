"""The cost profile: what a round costs on this machine, as data. Seconds of the target's
forward over n new tokens (n = 1..N, at a short and a long context) and of the draft's proposed
token, measured by costs.py; costs in 1-token target steps are derived here (`v`, `c`), and so is
the width each free-shape forward runs at (`cheapest_widths`: padded where wider is cheaper).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class CostProfile:
    """Seconds, measured; costs in 1-token target steps are derived (`v`, `c`)."""

    key: dict  # what it was measured for (model, device, dtype, threads, torch, ...)
    contexts: list[int]  # context lengths the curve was measured after
    verify_s: list[list[float]]  # [context][n-1]: one forward over n new tokens
    draft_s: dict[str, float] = field(default_factory=dict)  # draft label -> seconds per proposed token
    batch_s: dict[str, list[float]] = field(default_factory=dict)  # rows -> [n-1]: a [rows, n] verify (short context)
    weight_major: list[int] = field(default_factory=list)  # widths n of a [1, n] forward whose matmuls run W @ xᵀ (in the packed world: its LM head's; kernels.py)
    packed: list[int] = field(default_factory=list)  # widths n of a [1, n] forward that run oneDNN's prepacked weights
    batch_weight_major: dict[str, list[int]] = field(default_factory=dict)  # rows -> n whose [rows, n] verify runs W @ xᵀ
    batch_packed: dict[str, list[int]] = field(default_factory=dict)  # rows -> n whose [rows, n] verify runs prepacked
    prefill_s: list[float] = field(default_factory=list)  # [context]: prefilling its first context-1 tokens
    padded: dict[str, int] = field(default_factory=dict)  # n -> the wider width a free [1, n] forward runs at (cheapest_widths)
    spread: list[list[float]] = field(default_factory=list)  # [context][n-1]: how far the timed tries were apart (costs.spread)
    measured_s: float = 0.0  # how long measuring took
    timed: bool = True  # measured on this machine (False: made up, so the loop's own times do not refine it)
    cached: bool = False  # read from the cache (not measured in this run)

    @property
    def widths(self) -> int:
        return len(self.verify_s[0])

    @property
    def step_s(self) -> float:
        """One 1-token target step at the short context (seconds)."""
        return self.verify_s[0][0]

    def v(self, n: int, context: int | None = None) -> float:
        """One forward over n new tokens, in 1-token steps at the same context (linear between
        the measured contexts, clamped outside them)."""
        n = min(max(n, 1), self.widths)
        ratios = [row[n - 1] / row[0] for row in self.verify_s]
        if context is None or len(self.contexts) == 1:
            return ratios[0]
        (c0, c1), (r0, r1) = self.contexts[:2], ratios[:2]
        t = min(max((context - c0) / (c1 - c0), 0.0), 1.0)
        return r0 + t * (r1 - r0)

    @property
    def busy(self) -> bool:
        """Measured while the machine was busy: in some context, the widths' tries spread over
        BUSY_SPREAD at the median (another job disturbs every width it overlaps, and may come
        for one context only; one width whose time is bimodal on a quiet machine does not make
        it busy). A target faster than CHECKED_STEP_S per step is never called busy: timer
        noise spreads it."""
        return self.step_s >= CHECKED_STEP_S and any(row and statistics.median(row) > BUSY_SPREAD for row in self.spread)

    def width(self, n: int) -> int:
        """The width a free-shape one-row forward of n new tokens runs at (padded: cheapest_widths)."""
        return self.padded.get(str(n), n)

    def run_v(self, n: int, context: int | None = None) -> float:
        """v of a free-shape forward of n new tokens as it runs: at its padded width."""
        return self.v(self.width(n), context)

    def prefill(self, tokens: int) -> float:
        """A prefill of `tokens` prompt tokens in 1-token steps at that context (linear in the
        tokens through the two measured prefills; 0 without them): greedy and speculative runs
        both pay it, so a predicted speedup that leaves it out overshoots on short outputs."""
        if tokens <= 0 or len(self.prefill_s) != len(self.contexts) or len(self.contexts) < 2:
            return 0.0
        (n0, n1), (p0, p1) = [c - 1 for c in self.contexts[:2]], self.prefill_s[:2]
        seconds = max(p0 + (tokens - n0) * (p1 - p0) / (n1 - n0), 0.0)
        return seconds / self.step(tokens + 1)

    def step(self, context: int) -> float:
        """One 1-token target step after `context` tokens (seconds; linear between the measured
        contexts, clamped outside them)."""
        if len(self.contexts) < 2:
            return self.step_s
        (c0, c1), (s0, s1) = self.contexts[:2], (row[0] for row in self.verify_s[:2])
        t = min(max((context - c0) / (c1 - c0), 0.0), 1.0)
        return s0 + t * (s1 - s0)

    def form(self, n: int) -> str:
        """The matmul form a [1, n] forward was measured (and runs) in."""
        return "weight_major" if n in self.weight_major else "packed" if n in self.packed else "linear"

    def c(self, draft: str) -> float:
        """A proposed token's cost in target steps (0 for drafts that make no model call)."""
        return self.draft_s.get(draft, 0.0) / self.step_s

    def curve(self, context: int | None = None) -> list[float]:
        return [self.v(n, context) for n in range(1, self.widths + 1)]

    def batch(self, rows: int, of: int) -> tuple[list[float], float]:
        """For `rows` live rows of a batch measured at `of` rows: (v_rows(n) for n = 1..widths,
        in steps of the whole batch's 1-token forward; that forward's cost in 1-row steps).
        Between 1 and `of` rows the seconds are linear between the 1-row and the `of`-row
        measurements. Both at the short context: a batch's rows sit at different lengths."""
        wide = self.batch_s.get(str(of))
        one = self.verify_s[0]
        if wide is None or rows <= 1 or of <= 1:
            return self.curve(self.contexts[0]), 1.0
        t = min((rows - 1) / (of - 1), 1.0)
        seconds = [a + t * (x - a) for a, x in zip(one, wide)]
        return [x / seconds[0] for x in seconds], seconds[0] / self.step_s

    def as_dict(self) -> dict:
        """For JSON output: the costs in target steps, and what they were measured on."""
        return {"step_ms": self.step_s * 1e3, "contexts": self.contexts,
                "verify_cost": {str(c): [round(x, 3) for x in self.curve(c)] for c in self.contexts},
                "draft_cost": {name: round(self.c(name), 4) for name in self.draft_s},
                **({"batch_verify_cost": {rows: [round(x / s[0], 3) for x in s] for rows, s in self.batch_s.items()},
                    "batch_step": {rows: round(s[0] / self.step_s, 3) for rows, s in self.batch_s.items()}}
                   if self.batch_s else {}),
                **({"batch_weight_major": self.batch_weight_major} if self.batch_weight_major else {}),
                **({"batch_packed": self.batch_packed} if any(self.batch_packed.values()) else {}),
                "prefill_ms": [round(x * 1e3, 1) for x in self.prefill_s],
                "weight_major": self.weight_major, "packed": self.packed, "greedy_form": self.form(self.width(1)),
                "greedy_width": self.width(1), **({"padded": self.padded} if self.padded else {}),
                **({"spread": [[round(x, 3) for x in row] for row in self.spread]} if self.spread else {}),
                "cached": self.cached, "measured_s": round(self.measured_s, 2), **self.key}


BUSY_SPREAD = 0.3  # widths whose timed tries spread this much at the median (quartiles over the median): busy
CHECKED_STEP_S = 0.01  # targets faster than this per step (toys, tiny tests) are not judged: timer noise
PAD_GAIN = 0.97  # a wider forward is taken only where it measured at least 3 % cheaper (noise decides less)


def cheapest_widths(profile: CostProfile) -> dict[str, int]:
    """n -> w > n where a forward w wide measured cheaper than one n wide (by PAD_GAIN, on the
    mean of the measured contexts) and cheapest of all widths >= n: the plain step, and any
    free-shape forward, then runs that wide, padded (outputs dropped, K/V overwritten). On a
    CPU whose 2-row matmul beats its 1-row one (AMD EPYC, docs/kernels.md) the plain decode gets
    faster; where cost grows with width (this Intel Xeon) nothing is padded."""
    cost = [statistics.mean(row[n] / row[0] for row in profile.verify_s) for n in range(profile.widths)]
    padded = {}
    for n in range(1, profile.widths + 1):
        w = min(range(n, profile.widths + 1), key=lambda m: (cost[m - 1], m))
        if w > n and cost[w - 1] < PAD_GAIN * cost[n - 1]:
            padded[str(n)] = w
    return padded


def fixed(curve: list[float], draft_cost: float = 0.0, label: str = "draft") -> CostProfile:
    """A made-up profile (v(n) = curve[n-1] steps, c = draft_cost) for tests and toys."""
    return CostProfile({"model": "fixed"}, [1], [list(curve)], {label: draft_cost * curve[0]}, timed=False)
