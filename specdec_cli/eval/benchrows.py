"""bench's rows: plain numbers per configuration over some prompts (`BenchRow`; `PeerRow`, specdec
beside transformers' generate), the figures derived from them as properties, and `summarize`,
which folds prompt rows into category and overall rows. No torch; the columns that show these
figures are columns.py's, the terminal tables render.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from specdec_cli.loop.metrics import expected_speedup, expected_tokens_per_round


@dataclass(kw_only=True)  # ~30 fields: built by name (from_run), never by position
class BenchRow:
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
    greedy_width: int = 1  # the width the greedy steps ran at (pinned: W; free: padded where wider is cheaper)
    compiled: bool = False  # decoding.compile: decode forwards compiled (pinned: the plain greedy compiled at width 1)
    tree: bool = False  # the draft proposed token trees (docs/trees.md); drafted counts their nodes

    @classmethod
    def from_run(cls, *, prompt, config, result, greedy_wall_s: float, wall_s: float, baseline_tokens: int,
                 identical: bool | None, predicted_tokens: float, predicted_steps: float, **timing) -> BenchRow:
        """One prompt's row: `prompt` (bench's Prompt: id, category), `config` (bench.Config: draft,
        k, agree, verify and draft costs), `result` (its first speculative run: the counters), the
        timings measured around it, and the forward settings in `timing` (prefill_steps, shapes,
        pinned_greedy_wall_s, free_greedy_wall_s, greedy_form, greedy_width, compiled, tree; defaults where not given)."""
        s = result.stats
        draft = f"{config.draft.name} tree" if config.tree else config.draft.name  # a row apart from the chain's
        return cls(scope="prompt", name=prompt.id, category=prompt.category, draft=draft, k=config.k,
                   agree=config.agree, prompts=1, tokens=s.tokens, verify_rounds=s.verify_rounds,
                   target_forwards=s.target_forwards, draft_forwards=s.draft_forwards, drafted=s.drafted,
                   accepted=s.accepted, rejected_rounds=sum(r.accepted < r.positions for r in result.rounds),
                   greedy_wall_s=greedy_wall_s, wall_s=wall_s, baseline_tokens=baseline_tokens, identical=identical,
                   verify_cost=config.verify_cost, draft_cost=config.draft_cost, draft_cost_simulated=config.simulated,
                   predicted_tokens=predicted_tokens, predicted_steps=predicted_steps, **timing)

    @property
    def baseline(self) -> str:
        """Which greedy the speedup is against: the faster of the two when both were timed."""
        if not self.pinned_greedy_wall_s:
            return "greedy"
        plain = "width-1 greedy" if self.compiled else "free greedy"
        return "pinned greedy" if self.pinned_greedy_wall_s < self.free_greedy_wall_s else plain

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


@dataclass(kw_only=True)
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
