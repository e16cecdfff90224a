"""Schedules (how many tokens to propose each round), the cost profile and its cache, and
`specdec plan`'s replay."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from hypothesis import given, settings, strategies as st

from specdec_cli.engine import costs
from specdec_cli.cards.card import load_card
from specdec_cli.loop.decoding import decode, greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, OracleDraft, PromptLookupDraft
from specdec_cli.pair.loading import load_pair
from specdec_cli.eval.plan import PlanRow, ReplayTarget
from specdec_cli.loop.schedule import (Acceptance, AdaptiveK, Cost, Fixed, Heuristic, Scheduled, batch_length,
                                  best_length, expected_tokens, lookup_prior)
from specdec_cli.engine.toy_model import ToyLM
from tests.conftest import parse_json_lines
from tests.toys import NoisyToyLM, reference

NO_EOS = frozenset()


# ---------------------------------------------------------------------------- the choice of d
def lengths(curve, c, alpha, k=8):
    return best_length([alpha] * k, k, c, lambda n: curve[n - 1])[0]


FLAT = [1.0] * 10  # a GPU-like verify: n tokens cost one step
CPU = [1.00, 1.62, 2.32, 1.38, 1.28, 1.31, 1.52, 1.84, 2.0, 2.2]  # the measured CPU curve


def test_alpha_one_proposes_k_and_alpha_zero_proposes_nothing():
    assert lengths(FLAT, 0.0, 1.0) == 8
    assert lengths(FLAT, 0.0, 1.0, k=3) == 3
    assert lengths(FLAT, 0.0, 0.0) == 0
    assert lengths(CPU, 0.0, 0.02) == 0
    assert lengths(FLAT, 0.3, 0.2) == 0  # a draft costing 0.3 steps that is right 20% of the time never pays


def test_an_expensive_two_or_three_token_verify_is_skipped():
    # On the curve proposing 1 or 2 costs more than proposing 3 or 4: with middling
    # acceptance the schedule jumps past them (or stays at d = 0), never picks d = 1 or 2.
    for alpha in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        assert lengths(CPU, 0.0, alpha) not in (1, 2), alpha
    assert lengths(CPU, 0.0, 0.7) >= 3
    assert lengths(CPU, 0.0, 0.3) == 4  # 1.43 tokens for 1.28 steps: even a weak free draft pays at n = 5
    assert lengths(CPU, 0.0, 0.1) == 0
    # the same acceptance on a flat curve does propose 1-2 tokens
    assert lengths(FLAT, 0.2, 0.5) in (1, 2)


def test_expected_tokens_and_gain():
    assert expected_tokens([]) == 1
    assert expected_tokens([0.5, 0.5]) == pytest.approx(1.75)
    d, gain = best_length([1.0] * 4, 4, 0.0, lambda n: 1.0)
    assert (d, gain) == (4, 5.0)


def test_a_batch_speculates_only_when_it_pays_for_every_row():
    """One [B, d+1] verify for all rows: a row that would speculate alone (α = 0.9) does not
    get d = 4 when the 7 others have no match, since the rectangle costs the whole batch."""
    batch8 = [1.0, 1.31, 1.35, 1.65, 1.99, 2.09]  # SmolLM2 at 8 rows, measured (2 threads)
    v = lambda n: batch8[n - 1]  # noqa: E731
    keen, idle = [0.9] * 4, [0.0] * 4
    assert best_length(keen, 4, 0.0, lambda n: CPU[n - 1])[0] == 4  # alone it would propose 4
    assert batch_length([keen] + [idle] * 7, 0.0, v) == 0  # (7 + 4.1) / 1.99 < 8 / 1
    assert batch_length([keen] * 8, 0.0, v) == 3  # 8 * 3.44 / 1.65 = 16.7 beats d = 4's 8 * 4.1 / 1.99 = 16.5
    assert batch_length([keen] * 4 + [idle] * 4, 0.0, v) == 2  # (4 + 4 * 2.71) / 1.35 = 11.0 > 8
    assert batch_length([keen] * 8, 2.0, v) == 0  # a draft costing 2 batch steps per token
    assert batch_length([[], []], 0.0, v) == 0  # no row may propose (max_tokens reached)
    assert batch_length([[1.0, 1.0], [1.0]], 0.0, lambda n: 1.0) == 2  # rows capped below d count min(d, k_i)
    assert batch_length([keen], 0.0, lambda n: CPU[n - 1]) == best_length(keen, 4, 0.0, lambda n: CPU[n - 1])[0]


def test_acceptance_learns_per_position_and_forgets():
    table = Acceptance(prior=0.5, weight=2)
    assert table.alpha(1) == 0.5
    for _ in range(40):
        table.observe(drafted=3, accepted=1)  # position 1 always kept, position 2 always rejected
    assert table.alpha(1) > 0.9 and table.alpha(2) < 0.1
    assert table.alpha(3) == pytest.approx(table.alpha(2))  # never reached: borrows from position 2
    for _ in range(80):
        table.observe(drafted=1, accepted=0)
    assert table.alpha(1) < 0.1  # old evidence decays


def test_lookup_prior_rises_with_the_match_length():
    assert lookup_prior(0) == 0 < lookup_prior(1) < lookup_prior(2) < lookup_prior(3)


def test_cost_schedule_conditions_on_the_context_key():
    profile = costs.fixed(FLAT, 0.1, "d")
    schedule = Cost(lambda widths: profile, "d", prior=lambda key: 0.5)
    schedule.begin()
    for _ in range(30):
        schedule.observe(3, drafted=4, accepted=4)  # 3-gram matches: always right
        schedule.observe(1, drafted=2, accepted=0)  # 1-gram matches: always wrong
    assert schedule.length(3, 4, 100) == 4
    assert schedule.length(1, 4, 100) == 0


# ---------------------------------------------------------------------------- the heuristic (issue 12.1)
def test_heuristic_limit_never_exceeds_k_and_misses_shorten_at_once():
    target = ToyLM(48, seed=2)
    h = Heuristic(start=2)
    draft = Scheduled(OracleDraft(target.greedy_next, 48, 1.0, 0, "cpu", "toy"), h)
    result = speculative_decode(target, draft, [1, 2], 4, 200, NO_EOS)  # a long full-accept streak
    assert all(r.drafted == 4 for r in result.rounds[1:-1]) and h.limit <= 4
    # now misses: the very next round after a miss proposes fewer tokens
    h.begin()
    h.length(0, 4, 0)
    for _ in range(40):
        h.observe(0, 4, 4)
        assert h.limit <= 4
    h.observe(0, 4, 0)
    assert h.length(0, 4, 0) == 3
    h.observe(0, 3, 0)
    assert h.length(0, 4, 0) == 2


def test_heuristic_run_of_misses_after_streak_on_the_loop():
    target = ToyLM(48, seed=3)
    agree = [1.0] * 30 + [0.0] * 30  # right for a while, then always wrong

    class Switch(OracleDraft):
        def propose(self, tokens, k):
            self.agree = agree[min(len(tokens) - 2, len(agree) - 1)] if len(tokens) < 34 else 0.0
            return super().propose(tokens, k)

    draft = AdaptiveK(Switch(target.greedy_next, 48, 1.0, 0, "cpu", "switch"), start=2)
    result = speculative_decode(target, draft, [1, 2], 6, 60, NO_EOS)
    assert result.tokens == reference(target, [1, 2], 60)
    misses = [r.drafted for r in result.rounds if r.accepted < r.drafted]
    assert misses[:4] == [6, 5, 4, 3]  # shrinks from k at once, not from a limit far above k


# ---------------------------------------------------------------------------- exactness under every schedule
def schedules(kind: str):
    flat = costs.fixed([1.0, 1.3, 2.1, 1.2, 1.1, 1.4, 1.6, 1.7, 1.9], 0.1, "model")
    cheap = costs.fixed([1.0, 0.6, 0.8, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9], 0.0, "model")  # v(2) < v(1): lookup fills
    return {"fixed": Fixed(), "heuristic": Heuristic(),
            "cost": Cost(lambda widths: flat, "model", lambda key: 0.6),
            "cost-cheap-2": Cost(lambda widths: cheap, "model", lookup_prior)}[kind]


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(3, 40), k=st.integers(1, 8), noise=st.floats(0, 1), n=st.integers(1, 60),
       prompt=st.lists(st.integers(0, 2), min_size=1, max_size=12),
       kind=st.sampled_from(["fixed", "heuristic", "cost", "cost-cheap-2"]),
       draft_kind=st.sampled_from(["model", "lookup"]), eos=st.booleans())
def test_every_schedule_keeps_spec_equal_to_greedy(vocab, k, noise, n, prompt, kind, draft_kind, eos):
    target = ToyLM(vocab, seed=vocab)
    stop = frozenset([0]) if eos else NO_EOS
    inner = (ModelDraft(NoisyToyLM(target, noise), vocab, name="model") if draft_kind == "model"
             else PromptLookupDraft("cpu", 3, 1))
    draft = Scheduled(inner, schedules(kind))
    spec = speculative_decode(target, draft, prompt, k, n, stop)
    assert spec.tokens == greedy_decode(target, prompt, n, stop).tokens == reference(target, prompt, n, stop)
    assert all(r.drafted <= k for r in spec.rounds)


def test_cost_schedule_skips_a_useless_draft_and_uses_a_perfect_one():
    target = ToyLM(40, seed=5)
    profile = costs.fixed([1.0, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9], 0.2, "model")
    bad = Scheduled(ModelDraft(NoisyToyLM(target, 1.0), 40, name="model"), Cost(lambda w: profile, "model", lambda key: 0.6))
    result = speculative_decode(target, bad, [1, 2, 3], 4, 120, NO_EOS)
    late = result.rounds[20:]
    assert sum(r.drafted for r in late) <= len(late) // 4  # stops proposing once it has learned α ≈ 0
    good = Scheduled(ModelDraft(NoisyToyLM(target, 0.0), 40, name="model"), Cost(lambda w: profile, "model", lambda key: 0.6))
    result = speculative_decode(target, good, [1, 2, 3], 4, 120, NO_EOS)
    assert all(r.drafted == 4 for r in result.rounds[2:-2])


def test_a_pessimistic_prior_on_a_model_draft_is_corrected_by_probes():
    """A model draft learns nothing in a skipped round: without probes a prior that says "does
    not pay" is never tested (the Qwen pair drafted 0 tokens in 328). With `explore` the
    schedule probes after a few skipped rounds and, the draft being right, keeps drafting;
    a useless draft is probed ever more rarely (the patience doubles)."""
    target = ToyLM(40, seed=6)
    profile = costs.fixed([1.0, 1.9, 2.8, 2.0, 2.4, 2.6, 2.8, 3.0, 3.2], 0.17, "model")  # the Qwen pair's curve

    def run(noise, explore, prior=0.6):
        schedule = Cost(lambda w: profile, "model", lambda key: prior, explore=explore)
        draft = Scheduled(ModelDraft(NoisyToyLM(target, noise), 40, name="model"), schedule)
        result = speculative_decode(target, draft, [1, 2, 3], 4, 200, NO_EOS)
        assert result.tokens == reference(target, [1, 2, 3], 200)
        return [r.drafted for r in result.rounds]

    assert sum(run(0.0, explore=False)) == 0  # the prior alone never tries it
    good = run(0.0, explore=True)
    assert good[0] == 4 and sum(good) > 150  # probed on the first round, then kept drafting
    bad = run(1.0, explore=True)
    probes = [i for i, d in enumerate(bad) if d]
    assert probes[0] == 0 and probes[1] == 4 and len(probes) <= 7  # a failed first probe: 3 skipped rounds, then the next
    assert all(b - a >= 8 for a, b in zip(probes[1:], probes[2:]))  # then 4, 8, 16, ... skipped rounds apart
    # a probe that paid for itself is followed by another at once: a right draft behind the
    # most pessimistic prior drafts from the first round on (it used to wait 8, then 16 rounds)
    assert all(run(0.0, explore=True, prior=0.0)[:8])


def test_a_model_draft_opens_each_request_with_a_probe_at_full_length():
    """The prior (0.6) alone drafts 1 token on the Qwen pair's measured curve; the first round
    of every request proposes what would pay were the draft right (k = 4), so a right draft
    is drafting 3-4 from the second round on instead of creeping up from 1."""
    target = ToyLM(40, seed=7)
    profile = costs.fixed([1.0, 0.97, 1.14, 1.16, 1.33], 0.128, "model")
    schedule = Cost(lambda w: profile, "model", lambda key: 0.6, explore=True)
    schedule.begin()
    assert best_length(schedule.acceptance(0).alphas(4), 4, 0.128, lambda n: profile.v(n))[0] == 1

    def drafted(noise):
        draft = Scheduled(ModelDraft(NoisyToyLM(target, noise), 40, name="model"), schedule)
        result = speculative_decode(target, draft, [1, 2, 3], 4, 40, NO_EOS)
        assert result.tokens == reference(target, [1, 2, 3], 40)
        return [r.drafted for r in result.rounds]

    for _ in range(2):  # every request opens with the probe
        good = drafted(0.0)
        assert good[0] == 4 and min(good[1:-1]) >= 3
    bad = drafted(1.0)
    assert bad[0] == 4 and bad[1] <= 1  # a wrong opening: back to what the evidence says at once


def test_the_loops_verify_times_overrule_a_profile_that_is_far_off():
    """A profile whose 2-token verify read 0.66 steps (a lucky measurement) makes a 0.6 draft
    propose 1 token; three loop rounds that paid 1.05 steps for it overrule that (a median
    within 25 % of the profile would not), and the schedule drafts more."""
    profile = costs.CostProfile({}, [64], [[0.10, 0.066, 0.115, 0.125, 0.143]], {"m": 0.0128})
    schedule = Cost(lambda w: profile, "m", lambda key: 0.6)
    schedule.begin()
    schedule.opened = True  # past the opening probe
    assert schedule.length(0, 4, 100) == 1
    for seconds in (0.080, 0.075, 0.078):  # within 25 % of 0.066: the profile stands
        schedule.observe_verify(2, seconds, 100)
    assert schedule.v(profile, 2, 100) == pytest.approx(0.66) and schedule.length(0, 4, 100) == 1
    for seconds in (0.105, 0.104, 0.106, 0.105):
        schedule.observe_verify(2, seconds, 100)
    assert schedule.v(profile, 2, 100) == pytest.approx(1.04) and schedule.length(0, 4, 100) == 2
    made_up = costs.fixed([1.0, 0.66, 1.15], 0.128, "m")  # a fixed curve (tests, toys) is never overruled
    toy = Cost(lambda w: made_up, "m", lambda key: 0.6)
    toy.observe_verify(2, 5.0, 100)
    assert not toy.seen


def test_the_loop_reports_verify_times_but_not_to_a_replay():
    target = ToyLM(30, seed=2)
    reported = []
    draft = OracleDraft(target.greedy_next, 30, 1.0, 0, "cpu", "oracle")
    draft.observe_verify = lambda width, seconds, context: reported.append((width, context))
    result = speculative_decode(target, draft, [1, 2], 3, 12, NO_EOS)
    assert reported == [(r.drafted + 1, 2 + sum(x.emitted for x in result.rounds[:i])) for i, r in enumerate(result.rounds)]
    reported.clear()
    speculative_decode(ReplayTarget(target, [1, 2] + result.tokens), draft, [1, 2], 3, 12, NO_EOS)
    assert reported == []


def test_a_skipped_free_draft_still_learns_from_a_peek():
    """Prompt lookup costs nothing: a round the schedule skips still tells it whether the
    lookup's first token would have been right, so a pessimistic start recovers."""
    target = ToyLM(30, seed=1)
    profile = costs.fixed([1.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], 0.0, "x")  # proposing is expensive
    schedule = Cost(lambda w: profile, "prompt-lookup", lambda key: 0.0)
    prompt = reference(target, [4], 40)  # a prompt the continuation copies
    draft = Scheduled(PromptLookupDraft("cpu", 3, 1), schedule)
    speculative_decode(target, draft, [4] + prompt, 4, 30, NO_EOS)
    assert any(table.reached and table.reached[0] > 0 for table in schedule.table.values())


def test_a_lookup_that_matches_nothing_fills_only_where_two_tokens_verify_cheaper():
    """No n-gram matched (key 0): under the cost schedule the lookup still proposes one token
    (the last) when the profile says a 2-token verify costs less than a 1-token step, and
    proposes nothing when it does not. Either way the output is the target's greedy one."""
    target = ToyLM(40, seed=3)
    prompt, n = [5, 9, 17], 60
    want = reference(target, prompt, n)

    def rounds(curve):
        schedule = Cost(lambda w: costs.fixed(curve, 0.0, "x"), "x", lookup_prior)
        result = speculative_decode(target, Scheduled(PromptLookupDraft("cpu", 3, 1), schedule), prompt, 4, n, NO_EOS)
        assert result.tokens == want
        return result.rounds, schedule.table

    cheap, table = rounds([1.0, 0.6, 0.9, 1.0, 1.2])
    assert all(r.drafted >= 1 for r in cheap[:-1])  # every round verifies at least 2 tokens (the last has no room)
    assert table[0].reached and table[0].reached[0] > 0  # key 0 (the fillers) learned from
    dear, table = rounds([1.0, 1.2, 1.4, 1.5, 1.6])
    assert any(r.drafted == 0 for r in dear)  # no match and no filler: a plain step
    assert 0 not in table or not any(table[0].reached)


# ---------------------------------------------------------------------------- the cost profile cache
class Probe:
    """A target whose forwards are counted (the profile's measurements)."""

    def __init__(self):
        self.lm, self.calls = ToyLM(16), 0
        self.device, self.vocab_size, self.max_positions = self.lm.device, 16, None

    def new_cache(self):
        return self.lm.new_cache()

    def forward(self, ids, cache, keep=0):
        self.calls += 1
        return self.lm.forward(ids, cache, keep)


def test_profile_is_cached_and_remeasured_when_the_key_changes(monkeypatch):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    first = costs.profile(probe, "toy-a", None, {})
    assert not first.cached and probe.calls > 0 and first.widths == costs.MIN_WIDTHS
    files = list(costs.cache_dir("costs").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["key"]["model"] == "toy-a"
    calls = probe.calls
    again = costs.profile(probe, "toy-a", None, {})
    assert again.cached and probe.calls == calls and again.verify_s == first.verify_s
    other = costs.profile(probe, "toy-a", "v2", {})  # another revision: another key
    assert not other.cached and probe.calls > calls
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # another thread count: another key
    assert not costs.profile(probe, "toy-a", None, {}).cached
    assert len(list(costs.cache_dir("costs").glob("*.json"))) == 3
    assert costs.profile(probe, "toy-a", "v2", {}, remeasure=True).cached is False


def test_each_context_is_prefilled_once_whatever_the_widths(monkeypatch):
    """Every width shares one prefilled cache (rolled back after each try): a long prefill is
    the dear part of measuring a 1B+ target on a CPU."""
    monkeypatch.setattr(costs, "PROBE_REPEATS", 2)
    probe, widths = Probe(), []
    real = probe.forward
    probe.forward = lambda ids, cache, keep=0: (widths.append(ids.shape[1]), real(ids, cache, keep))[1]
    profile = costs.profile(probe, "toy-p", None, {})
    long = [w for w in widths if w > costs.MIN_WIDTHS]
    assert long == [c - 1 for c in profile.contexts]  # one prefill per context
    assert len(widths) == len(profile.contexts) * (1 + costs.MIN_WIDTHS * (2 + 1))  # warm-up + 2 tries per width


def test_a_batch_verify_curve_is_cached_with_the_profile(monkeypatch):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe, measured = Probe(), []
    found = costs.profile(probe, "toy-q", None, {})
    step = found.step_s

    def measure(widths):
        measured.append(widths)
        return [step * (1.5 + 0.25 * n) for n in range(widths)], [3], [4, 5]  # a [8, n] verify: 1.5, 1.75, ... steps

    costs.with_batch(found, 8, measure)
    costs.with_batch(found, 8, measure)
    assert measured == [costs.MIN_WIDTHS]  # measured once
    again = costs.profile(probe, "toy-q", None, {})
    assert again.cached and again.batch_s == found.batch_s and again.batch_weight_major == {"8": [3]}
    assert again.batch_packed == {"8": [4, 5]} and again.as_dict()["batch_packed"] == {"8": [4, 5]}
    curve, batch_step = again.batch(8, 8)
    assert batch_step == pytest.approx(1.5) and curve[1] == pytest.approx(1.75 / 1.5)
    one = again.curve(again.contexts[0])
    assert again.batch(1, 8) == (one, 1.0) and again.batch(5, 1) == (one, 1.0)
    assert again.batch(4, 7) == (one, 1.0)  # no 7-row measurement: the 1-row curve
    assert again.batch(4, 8)[1] == pytest.approx(1 + 3 / 7 * 0.5)  # 4 live rows of 8: 3/7 of the way
    assert "batch_verify_cost" in again.as_dict() and again.as_dict()["batch_step"] == {"8": 1.5}


def test_a_batch_in_the_packed_world_is_cached_with_its_greedy_step(monkeypatch, capsys):
    """A batch's packed world prepacks every n, its greedy step's n = 1 too
    (batch.rectangle_seconds): the cache keeps it and reads it back, not measuring again."""
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    found = costs.profile(probe, "toy-p", None, {})
    costs.with_batch(found, 4, lambda widths: ([found.step_s * 2] * widths, [], list(range(1, widths + 1))))
    capsys.readouterr()
    again = costs.profile(probe, "toy-p", None, {})
    assert again.cached and again.batch_packed == {"4": [1, 2, 3, 4, 5]} and capsys.readouterr().err == ""


def test_a_partly_live_batch_interpolates_seconds_not_ratios():
    """2 live rows of a batch measured at 3: halfway between the 1-row seconds [1, 2] and the
    3-row seconds [4, 5] is [2.5, 3.5]: v(2) = 1.4 batch steps, a batch step = 2.5 row steps
    (interpolating the ratios 2 and 1.25 would say 1.625)."""
    profile = costs.CostProfile({}, [32], [[1.0, 2.0]], batch_s={"3": [4.0, 5.0]})
    curve, step = profile.batch(2, 3)
    assert curve == pytest.approx([1.0, 1.4]) and step == pytest.approx(2.5)
    assert profile.batch(3, 3) == (pytest.approx([1.0, 1.25]), pytest.approx(4.0))


def test_a_cache_file_with_a_malformed_batch_curve_is_remeasured(monkeypatch, capsys):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    costs.profile(probe, "toy-r", None, {})
    (path,) = costs.cache_dir("costs").glob("*.json")
    for field, bad in [("batch_s", v) for v in (None, [1, 2], {"8": [1.0]}, {"8": "fast"})] + [
            (forms, v) for forms in ("batch_weight_major", "batch_packed")
            for v in (None, {"8": [3]}, [2])]:  # {"8": ...} without an 8-row curve
        raw = json.loads(path.read_text())
        raw[field] = bad
        path.write_text(json.dumps(raw))
        capsys.readouterr()
        assert not costs.profile(probe, "toy-r", None, {}).cached
        assert capsys.readouterr().err.startswith("Warning: cost profile ")


def test_a_wider_k_or_a_new_draft_completes_the_cached_profile(monkeypatch):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    costs.profile(probe, "toy-b", None, {})
    wide = costs.profile(probe, "toy-b", None, {}, widths=12)
    assert wide.widths == 12 and not wide.cached

    class Paying:
        name = "paying"

        def step_seconds(self, context):
            return 0.5 * wide.step_s

    with_draft = costs.profile(probe, "toy-b", None, {"paying": Paying()}, widths=12)
    assert with_draft.c("paying") == pytest.approx(0.5)
    assert costs.profile(probe, "toy-b", None, {"paying": Paying()}, widths=12).cached


def test_a_corrupt_cache_file_is_remeasured_with_one_warning(monkeypatch, capsys):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    costs.profile(probe, "toy-c", None, {})
    (path,) = costs.cache_dir("costs").glob("*.json")
    for garbage in ("{not json", json.dumps({"key": "x"}), json.dumps({"key": {}, "contexts": [1], "verify_s": [[-1]],
                                                                         "draft_s": {}, "measured_s": 0})):
        path.write_text(garbage)
        capsys.readouterr()
        profile = costs.profile(probe, "toy-c", None, {})
        warning = capsys.readouterr().err
        assert not profile.cached and warning.count("\n") == 1 and warning.startswith("Warning: cost profile ")
        assert "measuring again" in warning
        assert costs.profile(probe, "toy-c", None, {}).cached  # rewritten whole


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_read_only_cache_directory_means_no_cache(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "specdec").mkdir()
    (tmp_path / "specdec").chmod(stat.S_IRUSR | stat.S_IXUSR)
    profile = costs.profile(Probe(), "toy-d", None, {})
    assert not profile.cached and "running without the cache" in capsys.readouterr().err


def test_an_unwritable_cache_location_means_no_cache(monkeypatch, capsys, tmp_path):
    """(Also as root:) the cache 'directory' is a file, so nothing can be written under it."""
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    profile = costs.profile(Probe(), "toy-e", None, {})
    err = capsys.readouterr().err
    assert not profile.cached and err.count("\n") == 1 and "running without the cache" in err
    assert profile.v(1) == 1.0 and profile.widths == costs.MIN_WIDTHS


def test_v_interpolates_between_the_measured_contexts():
    profile = costs.CostProfile({}, [100, 300], [[1.0, 2.0], [2.0, 3.0]])
    assert profile.v(2, 100) == 2.0 and profile.v(2, 300) == 1.5 and profile.v(2, 200) == pytest.approx(1.75)
    assert profile.v(2, 10) == 2.0 and profile.v(2, 10_000) == 1.5 and profile.v(1, 5) == 1.0


def test_prefill_is_linear_in_prompt_tokens_and_priced_in_steps_at_its_context():
    """Prefills of 99 and 299 tokens took 0.5 s and 1.5 s; the 1-token step there costs 0.1 s
    and 0.2 s: a 199-token prompt costs 1.0 s = 1.0 / 0.15 steps, a 9-token one 0.05 s."""
    profile = costs.CostProfile({}, [100, 300], [[0.1, 0.2], [0.2, 0.3]], prefill_s=[0.5, 1.5])
    assert profile.prefill(199) == pytest.approx(1.0 / 0.15) and profile.prefill(9) == pytest.approx(0.05 / 0.1)
    assert profile.prefill(0) == 0.0 and costs.CostProfile({}, [100, 300], [[0.1], [0.2]]).prefill(50) == 0.0


def test_the_profile_times_each_contexts_prefill_and_rejects_a_malformed_one(monkeypatch, capsys):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    probe = Probe()
    found = costs.profile(probe, "toy-p", None, {})
    assert len(found.prefill_s) == len(found.contexts) and all(x > 0 for x in found.prefill_s)
    assert found.prefill(found.contexts[1] - 1) == pytest.approx(found.prefill_s[1] / found.verify_s[1][0])
    (path,) = costs.cache_dir("costs").glob("*.json")
    for bad in ([1.0], [0.0, 1.0], "slow"):
        raw = json.loads(path.read_text())
        path.write_text(json.dumps({**raw, "prefill_s": bad}))
        capsys.readouterr()
        assert not costs.profile(probe, "toy-p", None, {}).cached
        assert "unreadable" in capsys.readouterr().err


def test_predicted_speedup_counts_the_prefill_on_both_sides():
    """8 tokens in 2 rounds costing 2 steps: 4x for the decode alone, but with a prefill of 8
    steps that both runs pay, (8 + 8) / (2 + 8) = 1.6x."""
    row = PlanRow("x", 4, "cost", tokens=8, verify_rounds=2, predicted_steps=2.0)
    assert row.predicted_speedup == pytest.approx(4.0)
    row.prefill_steps = 8.0
    assert row.predicted_speedup == pytest.approx(1.6)


# ---------------------------------------------------------------------------- plan's replay
def test_replay_reproduces_the_real_rounds_exactly():
    target = ToyLM(50, seed=4)
    prompt = [3, 1, 4, 1, 5]
    ref = greedy_decode(target, prompt, 80, frozenset([0])).tokens
    replay = ReplayTarget(target, prompt + ref)
    for make in (lambda: ModelDraft(NoisyToyLM(target, 0.4), 50, name="m"),
                 lambda: Scheduled(PromptLookupDraft("cpu", 3, 1), Heuristic()),
                 lambda: OracleDraft(target.greedy_next, 50, 0.6, 1, "cpu", "o")):
        real = speculative_decode(target, make(), prompt, 5, 80, frozenset([0]))
        replayed = decode(replay, make(), prompt, 5, 80, frozenset([0]))
        assert replayed.tokens == real.tokens == ref
        assert [(r.drafted, r.accepted, r.emitted) for r in replayed.rounds] == \
               [(r.drafted, r.accepted, r.emitted) for r in real.rounds]


def test_plan_json_rows_and_one_recommendation(run):
    r = run("plan", "-c", "toy", "-k", "2,4", "--json")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    assert len(rows) == 1 + 2 * 3  # plain greedy + k x schedule
    assert sum(row["recommended"] for row in rows) == 1
    for row in rows:
        assert {"draft", "k", "schedule", "alpha_by_position", "predicted_tokens_per_round", "predicted_speedup",
                "recommended"} <= set(row)
    greedy = rows[0]
    assert greedy["k"] == 0 and greedy["predicted_speedup"] == 1.0 and greedy["predicted_tokens_per_round"] == 1.0
    fixed4 = next(x for x in rows if x["k"] == 4 and x["schedule"] == "fixed")
    assert len(fixed4["alpha_by_position"]) == 4 and all(0.4 < a < 1 for a in fixed4["alpha_by_position"])


def test_plan_tokens_per_round_equals_a_real_run(run):
    """The replayed rounds are the real ones: plan's tokens/round equals generate's."""
    pair = load_pair(load_card("toy"))
    r = run("plan", "-c", "toy", "-k", "4", "--json", "--limit", "1")
    rows = {(x["k"], x["schedule"]): x for x in parse_json_lines(r.stdout)}
    from specdec_cli.cards.prompts import SUITE

    from specdec_cli.cards.prompts import first_per_category
    from specdec_cli.loop.schedule import Scheduled as S

    tokens = rounds = 0
    for p in first_per_category(SUITE, 1):
        ids = pair.encode(p.text, 64)
        result = speculative_decode(pair.target, S(pair.draft.draft, Heuristic()), ids, 4, 64, pair.eos)
        tokens, rounds = tokens + result.stats.tokens, rounds + result.stats.verify_rounds
    assert rows[(4, "heuristic")]["predicted_tokens_per_round"] == pytest.approx(tokens / rounds)


def test_plan_recommends_greedy_when_nothing_pays(run, write_card, monkeypatch):
    # the toy's own forwards take microseconds (noise): price them like a CPU target
    monkeypatch.setattr(costs, "measure_target", lambda target, widths: ([32], [CPU[:widths]], ([], []), [], []))
    card = write_card({"description": "useless draft", "target": "toy", "draft": {"kind": "toy", "agree": 0.0},
                       "decoding": {"k": 4, "max_tokens": 24}, "device": "cpu"})
    r = run("plan", "-c", card, "-k", "2,4", "--json")
    rows = parse_json_lines(r.stdout)
    (best,) = [x for x in rows if x["recommended"]]
    assert best["k"] == 0 and best["draft"].startswith("none")
    r = run("plan", "-c", card, "-k", "2")
    assert "Recommended: plain greedy" in r.stderr


@pytest.mark.parametrize("args, message", [
    (("plan", "-c", "toy", "-k", "0"), "Error: command line: -k: must be an integer in 1..64, got 0"),
    (("plan", "-c", "toy", "-k", "2,99"), "Error: command line: -k: must be an integer in 1..64, got 99"),
    (("plan", "-c", "toy", "--limit", "0"), "Error: command line: --limit: must be an integer in 1..1000000, got 0"),
    (("generate", "-c", "toy", "--schedule", "fast", "ba"),
     "Error: command line: --schedule: must be one of cost, heuristic, fixed, got 'fast'"),
])
def test_plan_and_schedule_usage_errors(run, args, message):
    r = run(*args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.strip().splitlines()[-1] == message, r.stderr


def test_card_schedule_field(run, write_card):
    bad = write_card({"description": "x", "target": "toy", "draft": {"kind": "toy", "agree": 0.5, "schedule": "smart"}})
    r = run("generate", "-c", bad, "ba")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == (f"Error: {bad}: draft.schedule: must be one of cost, heuristic, "
                                                 "fixed, got 'smart'")
    both = write_card({"description": "x", "target": "toy",
                       "draft": {"kind": "toy", "agree": 0.5, "schedule": "fixed", "adaptive": True}}, "both")
    r = run("generate", "-c", both, "ba")
    assert r.exit_code == 2 and "draft.adaptive: true contradicts draft.schedule: fixed" in r.stderr
    old = write_card({"description": "x", "target": "toy", "draft": {"kind": "toy", "agree": 0.5, "adaptive": True}}, "old")
    assert load_card(str(old)).draft.schedule == "heuristic"
    assert load_card("smollm2").draft.schedule == "cost"


def test_generate_json_reports_the_cost_profile(run):
    r = run("generate", "-c", "toy", "--json", "ba be bi")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    profile = out["cost_profile"]
    assert profile["model"] == "toy" and profile["threads"] == torch.get_num_threads()
    assert len(profile["verify_cost"][str(profile["contexts"][0])]) >= 5 and profile["step_ms"] > 0
    assert out["draft"] == "toy(agree=0.7)+cost"
    r = run("generate", "-c", "toy", "--json", "--schedule", "fixed", "ba be bi")
    out = json.loads(r.stdout)
    assert out["draft"] == "toy(agree=0.7)" and "cost_profile" not in out
