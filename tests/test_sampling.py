"""Speculative sampling on the toy: the same distribution as the target, whatever the draft.

The toy computes its exact next-token distribution from scratch (`next_logits`), so the exact
probability of every short continuation is known. Each exactness test draws N continuations
and runs a chi-square goodness-of-fit test per 1..P leading tokens (bins: outcomes with expected
count >= 5, computed from N and the exact distribution before drawing; the rest pooled), and a
distribution-free Hoeffding bound on the first token. The tolerance is the fixed level ALPHA,
not a hand-tuned margin: an exact sampler fails with probability <= ALPHA at a random seed (here
the seed is fixed, so the outcome is reproducible), and the broken rules below must fail it.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from specdec_cli.loop import sampling
from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, OracleDraft, PromptLookupDraft
from specdec_cli.loop.schedule import AdaptiveK
from specdec_cli.loop.sampling import (Sampling, prefix_distribution, sample_decode, sequence_probability,
                                  speculative_sample, warp)
from specdec_cli.eval.stattest import chi2_sf, goodness_of_fit, homogeneity
from specdec_cli.engine.toy_model import ToyLM

from .conftest import parse_json_lines, toy_card_dict

ALPHA = 1e-3  # the level every exactness test runs at
N = 20_000  # draws per exactness test
EOS = frozenset([0])
TARGET = ToyLM(vocab=12, seed=1, scale=3.0)  # small vocabulary: 3 tokens have 1,728 joint outcomes
PROMPT = [3, 5, 7, 3, 5]  # repeats, so prompt lookup always has something to propose
T1 = Sampling(temperature=1.0)
WARPED = Sampling(temperature=0.7, top_k=8, top_p=0.9)  # some tokens have p = 0: never emitted


pytestmark = pytest.mark.usefixtures("one_thread")  # the toy's tensors are tiny: one thread is fastest


def spec_draws(draft, settings=T1, n=N, k=2, positions=3, seed=0, target=TARGET) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [tuple(speculative_sample(target, draft, PROMPT, k, positions, EOS, settings, g).tokens) for _ in range(n)]


def plain_draws(settings=T1, n=N, positions=3, seed=0) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [tuple(sample_decode(TARGET, PROMPT, positions, EOS, settings, g).tokens) for _ in range(n)]


def exact_p_value(draws: list[tuple], settings: Sampling, positions: int) -> float:
    """Chi-square goodness of fit of the first 1..positions tokens against the exact
    distribution; the smallest p-value, Bonferroni-adjusted over the positions."""
    next_probs = lambda tokens: settings.warp(TARGET.next_logits(tokens))  # noqa: E731
    levels = prefix_distribution(next_probs, PROMPT, positions, EOS, 5 / len(draws))  # bins fixed before looking
    p_values = []
    for j, bins in enumerate(levels, 1):
        seen = Counter(d[:j] for d in draws)
        zero = sum(c for s, c in seen.items() if s not in bins and not sequence_probability(next_probs, PROMPT, s))
        p_values.append(goodness_of_fit(seen, bins, impossible=zero).p_value)
    return min(1.0, positions * min(p_values))


def first_token_deviation_ok(draws: list[tuple], settings: Sampling) -> bool:
    """Hoeffding + a union bound over the vocabulary: every first-token frequency lies within
    sqrt(ln(2V/ALPHA) / 2N) of its exact probability, except with probability ALPHA."""
    p = settings.warp(TARGET.next_logits(PROMPT))
    counts = Counter(d[0] for d in draws)
    bound = math.sqrt(math.log(2 * len(p) / ALPHA) / (2 * len(draws)))
    return max(abs(counts[t] / len(draws) - float(p[t])) for t in range(len(p))) <= bound


def matches_exact(draws, settings=T1, positions=3) -> bool:
    return exact_p_value(draws, settings, positions) >= ALPHA and first_token_deviation_ok(draws, settings)


def model_draft(vocab=12, shared=12):
    """A draft with a real distribution q != p: another toy, wrapped like a real draft model."""
    return ModelDraft(ToyLM(vocab=vocab, seed=2, scale=3.0), shared)


# ---------------------------------------------------------------------------- exactness
def always_accept(u, p_x, q_x):
    return torch.ones_like(u, dtype=torch.bool)


@pytest.mark.parametrize("rule", ["min(1, p/q)", "always accept"])
def test_speculative_sampling_with_a_model_draft_matches_the_exact_distribution(rule, monkeypatch):
    """20,000 draws of 3 tokens (k = 2: accept, correction and bonus at every position) fit the
    exact distribution; the same test fails a broken rule (keeping every draft token samples
    from q, not p), so it can fail."""
    if rule == "always accept":
        monkeypatch.setattr(sampling, "accept", always_accept)
    assert matches_exact(spec_draws(model_draft())) == (rule == "min(1, p/q)")


def test_correction_from_p_instead_of_the_residual_is_detected(monkeypatch):
    """The subtler bug: after a rejection, drawing the correction from p (not max(0, p - q))."""
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    assert not matches_exact(spec_draws(model_draft(), n=5_000))


def test_prompt_lookup_one_hot_q_matches_under_top_k_top_p():
    """A deterministic proposal is a one-hot q; warping leaves some tokens at p = 0."""
    assert matches_exact(spec_draws(PromptLookupDraft(TARGET.device), WARPED, n=5_000, positions=2), WARPED, 2)


def test_plain_sampling_matches_the_exact_distribution():
    assert matches_exact(plain_draws(WARPED, n=5_000), WARPED)


@pytest.mark.parametrize("draft", [
    pytest.param(lambda: OracleDraft(TARGET.greedy_next, 12, 0.7, 0, TARGET.device, "toy"), id="oracle"),
    pytest.param(lambda: AdaptiveK(model_draft(), start=1), id="model+adaptive"),
    pytest.param(lambda: model_draft(vocab=9, shared=9), id="narrower-draft-vocab"),
    pytest.param(lambda: model_draft(vocab=16, shared=12), id="wider-draft-vocab"),
])
def test_other_drafts_match_the_exact_distribution(draft):
    """q = 0 beyond a narrower draft's vocabulary; a wider one is cut to the shared ids."""
    assert matches_exact(spec_draws(draft(), WARPED, n=2_500, k=3), WARPED)


def test_two_sample_homogeneity_the_real_model_path(monkeypatch):
    """On real models verify-exactness compares against plain sampling: same verdicts here."""
    plain = Counter(d[:2] for d in plain_draws(n=2_000, positions=2, seed=1))
    good = Counter(d[:2] for d in spec_draws(model_draft(), n=2_000, positions=2, seed=2))
    assert homogeneity(good, plain).p_value >= ALPHA
    monkeypatch.setattr(sampling, "accept", always_accept)
    broken = Counter(d[:2] for d in spec_draws(model_draft(), n=2_000, positions=2, seed=2))
    assert homogeneity(broken, plain).p_value < 1e-6


# ---------------------------------------------------------------------------- behaviour
def test_same_seed_same_tokens_other_seed_other_tokens():
    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return speculative_sample(TARGET, model_draft(), PROMPT, 4, 60, frozenset(), T1, g).tokens

    assert run(7) == run(7) and run(7) != run(8)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert sample_decode(TARGET, PROMPT, 60, frozenset(), T1, g1).tokens == sample_decode(TARGET, PROMPT, 60, frozenset(), T1, g2).tokens


def test_statistics_and_stop_rule_hold_when_sampling():
    g = torch.Generator().manual_seed(0)
    result = speculative_sample(TARGET, model_draft(), PROMPT, 4, 200, frozenset(), T1, g)
    s = result.stats
    assert s.tokens == 200 == len(result.tokens) == sum(r.emitted for r in result.rounds)
    assert s.target_forwards == s.verify_rounds + 1 and 0 < s.accepted < s.drafted
    assert all(r.emitted == r.accepted + 1 for r in result.rounds[:-1]) and s.draft_forwards > 0
    stopped = [speculative_sample(TARGET, model_draft(), PROMPT, 4, 200, EOS, T1, g).tokens for _ in range(30)]
    assert all(0 not in t[:-1] and (t[-1] == 0 or len(t) == 200) for t in stopped)


def test_draws_from_a_shared_prefill_equal_fresh_ones():
    """verify-exactness copies one prefilled cache per prompt: same tokens as prefilling each
    draw, also with a sliding window (tiny random Mistral, window 8, 17-token prompt)."""
    from pathlib import Path

    from specdec_cli.loop.decoding import prefill
    from specdec_cli.engine.models import early_exit, load, parse_ref

    target, _ = load(parse_ref("random:tiny-mistral-swa.json", Path(__file__).parent / "data"), torch.device("cpu"), torch.float32)
    prompt = list(range(3, 20))
    with torch.inference_mode():
        prefix = target.new_cache()
        prefill(target, prefix, prompt)
    for draft in (ModelDraft(early_exit(target, 1), target.vocab_size), PromptLookupDraft(target.device)):
        def draw(seed, cache):
            g = torch.Generator().manual_seed(seed)
            return speculative_sample(target, draft, prompt, 3, 12, frozenset(), T1, g, cache).tokens

        assert [draw(i, prefix) for i in range(4)] == [draw(i, None) for i in range(4)]
    fresh = sample_decode(target, prompt, 12, frozenset(), T1, torch.Generator().manual_seed(0)).tokens
    assert sample_decode(target, prompt, 12, frozenset(), T1, torch.Generator().manual_seed(0), prefix).tokens == fresh
    assert prefix.get_seq_length() == len(prompt) - 1  # the shared prefill is never written to


def test_warp_matches_transformers_warpers():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0)) * 3
    for t, k, p in [(0.7, 0, 1.0), (1.3, 20, 1.0), (0.8, 0, 0.9), (0.5, 50, 0.8), (2.0, 1, 1.0)]:
        ref = TemperatureLogitsWarper(t)(None, logits.clone())
        ref = TopKLogitsWarper(k)(None, ref) if k else ref
        ref = TopPLogitsWarper(p)(None, ref) if p < 1 else ref
        assert torch.allclose(warp(logits, t, k, p), ref.softmax(-1), atol=1e-6), (t, k, p)
    assert torch.equal(warp(logits, 0), torch.nn.functional.one_hot(logits.argmax(-1), 300).float())


def test_chi2_sf_known_values():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
    assert chi2_sf(124.342113404, 100) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(math.inf, 3) == 0.0 and chi2_sf(7.0, 0) == 1.0


def test_temperature_zero_is_the_greedy_path():
    from specdec_cli.cards.card import load_card, override
    from specdec_cli.pair.loading import load_pair

    pair = load_pair(override(load_card("toy"), temperature=0.0))
    ids = pair.encode("ba be", 40)
    expected = speculative_decode(pair.target, pair.draft, ids, 4, 40, pair.eos).tokens
    assert pair.spec(ids, 4, 40).tokens == expected == greedy_decode(pair.target, ids, 40, pair.eos).tokens


# ---------------------------------------------------------------------------- CLI
def test_generate_sampling_json_reproducible_and_not_an_error_when_different(run):
    args = ("generate", "-c", "toy", "--json", "-t", "1.0", "--top-p", "0.95", "--seed", "3", "ba be")
    first, again = run(*args), run(*args)
    assert first.exit_code == 0, first.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["spec"]["tokens"] == b["spec"]["tokens"] and a["sample"]["tokens"] == b["sample"]["tokens"]
    assert a["sampling"] == {"temperature": 1.0, "top_k": 0, "top_p": 0.95, "seed": 3}
    assert "greedy" not in a and a["identical"] is False  # two samples differ; exit 0 all the same
    m = a["spec"]["metrics"]
    assert m["tokens"] == len(a["spec"]["tokens"]) and m["accept_rate"] is not None and m["tokens_per_round"] >= 1
    other = json.loads(run(*args[:-2], "4", "ba be").stdout)
    assert other["spec"]["tokens"] != a["spec"]["tokens"]


def test_generate_sampling_table_and_card_fields(run, write_card):
    card = toy_card_dict()
    card["decoding"].update(temperature=0.9, top_k=20, seed=5)
    r = run("generate", "-c", write_card(card), "ba be")
    assert r.exit_code == 0 and "plain sampling" in r.stderr and "T=0.9 top-k=20" in r.stderr
    assert "acceptance rate" in r.stderr and "not expected" in r.stderr


def test_verify_exactness_sampling_on_toy(run):
    r = run("verify-exactness", "-c", "toy", "-t", "1.0", "-N", "600", "--positions", "2", "-k", "1,3",
            "--json", "ba be", "di do")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    assert len(rows) == 2 * 2 * 2 and all(row["passed"] and row["reference"] == "exact" for row in rows)
    assert {row["positions"] for row in rows} == {1, 2} and all(row["samples"] == 600 for row in rows)
    assert all(row["threshold"] == pytest.approx(0.01 / 8) and row["temperature"] == 1.0 for row in rows)
    table = run("verify-exactness", "-c", "toy", "-t", "1.0", "-N", "300", "ba be")
    assert table.exit_code == 0 and "exact distribution" in table.stdout and "2/2 tests pass" in table.stderr


def test_verify_exactness_sampling_exits_1_on_a_broken_rule(run, monkeypatch):
    monkeypatch.setattr(sampling, "accept", lambda u, p_x, q_x: torch.ones_like(u, dtype=torch.bool))
    r = run("verify-exactness", "-c", "toy", "-t", "0.5", "-N", "300", "--positions", "2", "ba be")
    assert r.exit_code == 1 and "NO" in r.stdout


@pytest.mark.parametrize("args, message", [
    (("-t", "-1"), "--temperature: must be a finite number >= 0"),
    (("--top-p", "0"), "--top-p: must be a number in (0, 1]"),
    (("--top-p", "1.5"), "--top-p: must be a number in (0, 1]"),
    (("--top-k", "-2"), "--top-k: must be an integer in 0.."),
    (("--seed", "-1"), "--seed: must be an integer in 0.."),
])
def test_sampling_option_errors(run, args, message):
    r = run("generate", "-c", "toy", *args, "ba")
    assert r.exit_code == 2 and message in r.stderr and r.stderr.startswith("Error: ")


def test_sampling_card_and_verify_option_errors(run, write_card):
    card = toy_card_dict()
    card["decoding"]["temperature"] = "hot"
    r = run("generate", "-c", write_card(card), "ba")
    assert r.exit_code == 2 and "decoding.temperature: must be a finite number >= 0" in r.stderr
    for args, message in [(("--alpha", "1.5"), "--alpha: must be a number in (0, 1)"),
                          (("--samples", "3"), "--samples: must be an integer in 10.."),
                          (("--positions", "0"), "--positions: must be an integer in 1..")]:
        r = run("verify-exactness", "-c", "toy", "-t", "1", *args, "ba")
        assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_bench_samples_when_the_card_samples(run, write_card):
    """A card's temperature is honoured, not ignored: plain vs speculative sampling, not compared."""
    card = toy_card_dict()
    card["decoding"]["temperature"] = 0.9
    r = run("bench", "-c", write_card(card), "-r", "1", "--limit", "1", "-n", "12", "--json")
    assert r.exit_code == 0, r.stderr
    rows = [row for row in parse_json_lines(r.stdout) if row.get("row") == "bench"]
    assert rows and all(row["identical"] is None for row in rows)
    r = run("bench", "-c", write_card(card), "-r", "1", "--limit", "1", "-n", "12")
    assert r.exit_code == 0 and "SAMPLING T=0.9" in r.stdout