"""What pinned shapes cost, priced where choices are made: a pinned round is a [rows, k+1]
forward whatever d, so it costs v(k+1) (docs/shapes.md, "What it costs"). The cost schedule,
a batch's one length per round and `plan` must price it so, and differ from free shapes' v(d+1)
where they should. Every expected figure is worked out by hand from a made-up profile, not by
the code under test: v(n) = 1 + (n-1)/4 steps, a model draft's token c = 0.3 steps, acceptance
0.5 at every position (E[d] = 1, 1.5, 1.75, 1.875, 1.9375 for d = 0..4).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specdec_cli.engine.costs import CostProfile
from specdec_cli.loop.batch import Lengths
from specdec_cli.loop.schedule import Cost
from specdec_cli.pair.loading import Pair

from .conftest import parse_json_lines

STEP_S = 0.1
PROFILE = CostProfile(key={"made up": True}, contexts=[64], verify_s=[[STEP_S * (1 + (n - 1) / 4) for n in range(1, 10)]],
                      draft_s={"model": 0.3 * STEP_S}, timed=False)
K, ALPHA = 4, 0.5


def v(n: int) -> float:
    return 1 + (n - 1) / 4


@pytest.mark.parametrize(("draft", "free", "pinned"), [
    # free draft, c = 0. free: E[d] / v(d+1) = 1, 1.2, 1.167, 1.071, 0.969 -> d = 1;
    # pinned: E[d] / v(5) = 0.5, 0.75, 0.875, 0.938, 0.969 -> d = 4 (proposes all it has)
    ("lookup", 1, 4),
    # model draft, c = 0.3. free: E[d] / (0.3 d + v(d+1)) = 1, 0.968, 0.833, ... -> d = 0;
    # pinned: E[d] / (0.3 d + 2) = 0.5, 0.652, 0.673, 0.647, 0.605 -> d = 2 (weighs only c)
    ("model", 0, 2),
])
def test_the_cost_schedule_prices_a_pinned_round_at_v_k_plus_1(draft, free, pinned):
    for shapes, expected in ((False, free), (True, pinned)):
        schedule = Cost(lambda widths: PROFILE, draft, prior=lambda key: ALPHA, pinned=shapes)
        schedule.begin()
        assert schedule.length(0, K, 64) == expected, ("pinned" if shapes else "free", draft)


@pytest.mark.parametrize(("draft", "free", "pinned"), [
    # two rows, each E[d] as above; a plain batched step is worth 2 tokens.
    # free draft. free: 2 E[d] / v(d+1) = 2, 2.4, 2.33, 2.14, 1.94 -> d = 1;
    # pinned: 2 E[d] / v(5) = 1, 1.5, 1.75, 1.875, 1.9375 -> d = 4
    ("lookup", 1, 4),
    # model draft: two rows' proposals cost 2 d c. free: 2, 3 / 1.85 = 1.62, ... -> d = 0;
    # pinned: 2 E[d] / (0.6 d + 2) = 1, 1.154, 1.094, 0.987, 0.924 -> d = 1
    ("model", 0, 1),
])
def test_a_batch_s_length_prices_a_pinned_round_at_v_k_plus_1(draft, free, pinned):
    def row():
        draft = SimpleNamespace(outlook=lambda tokens, k: [ALPHA] * k, decided=None)
        draft.decide = lambda d: setattr(draft, "decided", d)
        return SimpleNamespace(rounds=[], tokens=[5, 6, 7], draft=draft)

    for shapes, expected in ((False, free), (True, pinned)):
        rows = [row(), row()]
        Lengths(PROFILE, 2, draft, explore=False, pinned=shapes).decide(rows, [K, K])
        assert [r.draft.decided for r in rows] == [expected] * 2, ("pinned" if shapes else "free", draft)


def test_plan_prices_pinned_rounds_beside_free_ones(run, monkeypatch, one_thread):
    """plan's two columns from the same replayed rounds, each against an independent sum: free,
    a round costs d c + v(d+1); pinned, d c + v(k+1). The replayed rounds of the toy draft
    (free shapes on a float32 CPU target) draft fewer than k, so the two must differ."""
    monkeypatch.setattr(Pair, "cost_profile", lambda self, drafts=(), widths=0: PROFILE)
    r = run("plan", "-c", "toy", "-k", "2,4", "--json")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    plain = next(x for x in rows if x["k"] == 0)
    assert plain["predicted_speedup"] == plain["pinned_speedup"] == 1.0  # greedy: a step a token, free shapes
    speculative = [x for x in rows if x["k"]]
    assert len(speculative) == 6 and any(x["drafted"] < x["verify_rounds"] * x["k"] for x in speculative)
    for x in speculative:
        c, rounds, drafted = x["draft_cost"], x["verify_rounds"], x["drafted"]
        assert c == 0.0  # the toy draft makes no model call
        free = rounds + drafted / 4 + drafted * c  # Σ v(d+1) = rounds + drafted / 4
        pinned = rounds * v(x["k"] + 1) + drafted * c
        assert x["predicted_speedup"] == pytest.approx(x["tokens"] / free), x
        assert x["pinned_speedup"] == pytest.approx(x["tokens"] / pinned), x
        if drafted < rounds * x["k"]:
            assert x["pinned_speedup"] < x["predicted_speedup"], x
