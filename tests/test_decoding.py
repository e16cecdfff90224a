"""The decode loop on the toy target and on tiny random transformers models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specdec_cli.loop.decoding import greedy_decode, speculative_decode, stop
from specdec_cli.drafts import ModelDraft, OracleDraft, PromptLookupDraft
from specdec_cli.loop.schedule import AdaptiveK
from specdec_cli.engine.models import HFLM, early_exit, load, parse_ref
from specdec_cli.engine.toy_model import ToyLM

from .conftest import DATA, transformers_greedy
from .toys import reference  # greedy with no cache and no rollback

NO_EOS = frozenset()


def toy_draft(target, agree, seed=0):
    return OracleDraft(target.greedy_next, target.vocab_size, agree, seed, target.device, "toy")


@pytest.mark.parametrize("agree", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("k", range(1, 9))
def test_speculative_equals_greedy_on_toy(agree, k):
    target = ToyLM(vocab=48, seed=1)
    prompt = [5, 9, 2, 7]
    greedy = greedy_decode(target, prompt, 120, NO_EOS)
    spec = speculative_decode(target, toy_draft(target, agree, seed=k), prompt, k, 120, NO_EOS)
    assert spec.tokens == greedy.tokens == reference(target, prompt, 120)
    s = spec.stats
    assert s.tokens == 120 == sum(r.emitted for r in spec.rounds)
    assert s.verify_rounds == len(spec.rounds) and s.target_forwards == s.verify_rounds + 1
    assert s.accepted <= s.drafted and all(r.accepted <= r.drafted <= k for r in spec.rounds)
    # every round but the last emits accepted + 1 (the correction or the bonus token)
    assert all(r.emitted == r.accepted + 1 for r in spec.rounds[:-1])


@pytest.mark.parametrize("k", range(1, 9))
def test_full_agreement_emits_k_plus_one_per_round(k):
    target = ToyLM(vocab=64, seed=0)
    spec = speculative_decode(target, toy_draft(target, 1.0), [3, 4], k, 100, NO_EOS)
    assert [r.emitted for r in spec.rounds[:-1]] == [k + 1] * (len(spec.rounds) - 1)
    assert spec.stats.accept_rate == 1.0
    assert len(spec.rounds) == -(-100 // (k + 1))  # ceil: the last round is trimmed to max_tokens


def test_zero_agreement_emits_one_token_per_round():
    target = ToyLM()
    spec = speculative_decode(target, toy_draft(target, 0.0), [1, 2, 3], 4, 50, NO_EOS)
    assert spec.stats.accepted == 0 and spec.stats.verify_rounds == 50 and spec.stats.drafted == 4 * 46 + 3 + 2 + 1
    # near the end the loop never drafts past max_tokens: the last rounds draft 3, 2, 1, 0
    assert [r.drafted for r in spec.rounds[-4:]] == [3, 2, 1, 0]


def test_agreement_raises_tokens_per_round():
    target = ToyLM()
    rates = []
    for agree in (0.3, 0.7, 1.0):
        s = speculative_decode(target, toy_draft(target, agree), [1, 2], 4, 300, NO_EOS).stats
        rates.append(s.tokens_per_round)
    assert rates[0] < rates[1] < rates[2] == 300 / 60


def first_eos_prompt(target, eos=0, limit=40):
    """A prompt whose greedy continuation hits EOS within `limit` tokens, and where."""
    for a in range(1, 60):
        prompt = [a, a + 1]
        out = reference(target, prompt, limit)
        if eos in out:
            return prompt, out.index(eos)
    raise AssertionError("no prompt reaches EOS")


@pytest.mark.parametrize("agree", [0.0, 0.5, 1.0])
def test_eos_is_emitted_and_ends_generation(agree):
    target = ToyLM(vocab=16, seed=3)
    prompt, at = first_eos_prompt(target)
    greedy = greedy_decode(target, prompt, 100, frozenset([0]))
    spec = speculative_decode(target, toy_draft(target, agree), prompt, 6, 100, frozenset([0]))
    assert greedy.tokens == spec.tokens == reference(target, prompt, at + 1)
    assert spec.tokens[-1] == 0 and 0 not in spec.tokens[:-1]


def test_max_tokens_is_exact_and_eos_at_the_limit_counts():
    target = ToyLM(vocab=16, seed=3)
    prompt, at = first_eos_prompt(target)
    for n in (1, at, at + 1):
        spec = speculative_decode(target, toy_draft(target, 1.0), prompt, 8, n, frozenset([0]))
        assert spec.tokens == reference(target, prompt, min(n, at + 1))
        assert len(spec.tokens) == n


def test_one_token_prompt_and_max_tokens_one():
    target = ToyLM()
    assert speculative_decode(target, toy_draft(target, 1.0), [7], 4, 1, NO_EOS).tokens == reference(target, [7], 1)
    assert greedy_decode(target, [7], 5, NO_EOS).tokens == reference(target, [7], 5)


def test_stop_rule():
    assert stop([1, 2, 3], 0, 10, frozenset([2])) == ([1, 2], True)
    assert stop([1, 2, 3], 8, 10, NO_EOS) == ([1, 2], True)
    assert stop([1, 2], 0, 10, NO_EOS) == ([1, 2], False)
    assert stop([5, 2], 9, 10, frozenset([2])) == ([5], True)


def test_prompt_lookup_proposes_the_continuation_of_the_latest_match():
    draft = PromptLookupDraft(torch.device("cpu"), max_ngram=3)
    assert draft.lookup([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3], 3) == [8, 5, 1]
    assert draft.lookup([4, 5, 6, 4], 2) == [5, 6]  # falls back to a 1-gram
    assert draft.lookup([1, 2, 3], 4) == []


def test_prompt_lookup_is_exact_on_toy():
    target = ToyLM(vocab=8, seed=2)  # small vocab: plenty of repeats to look up
    prompt = [1, 2, 3, 4, 1, 2, 3]
    greedy = greedy_decode(target, prompt, 200, NO_EOS)
    spec = speculative_decode(target, PromptLookupDraft(target.device), prompt, 5, 200, NO_EOS)
    assert spec.tokens == greedy.tokens and spec.stats.accepted > 0


def test_adaptive_k_grows_after_full_accepts_and_stays_exact():
    target = ToyLM()
    draft = AdaptiveK(toy_draft(target, 1.0), start=1)
    spec = speculative_decode(target, draft, [1, 2], 8, 60, NO_EOS)
    assert [r.drafted for r in spec.rounds[:5]] == [1, 3, 5, 7, 8]
    assert spec.tokens == reference(target, [1, 2], 60)


# ---------------------------------------------------------------- tiny random transformers models
def random_lm(config: str):
    return load(parse_ref(f"random:{config}", DATA), torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("config", ["tiny-mistral-swa.json", str(Path(__file__).parents[1] / "cards/configs/tiny-llama.json")])
def test_random_model_spec_equals_transformers_generate(config):
    """Sliding-window (window 8, 40 tokens) and plain caches: rollback stays exact."""
    target, _ = random_lm(config)
    prompt = list(range(3, 15))
    reference = transformers_greedy(target, prompt, 40)
    assert greedy_decode(target, prompt, 40, NO_EOS).tokens == reference
    same, _ = random_lm(config)  # same config + seed = same weights: the draft always agrees
    spec = speculative_decode(target, ModelDraft(same, target.vocab_size), prompt, 3, 40, NO_EOS)
    assert spec.tokens == reference and spec.stats.accept_rate == 1.0
    assert spec.stats.draft_forwards > 0 and spec.stats.tokens_per_round == 4
    layers = len(target.model.get_decoder().layers)
    shallow = ModelDraft(early_exit(target, layers - 1), target.vocab_size)
    for k in (1, 2, 5):
        assert speculative_decode(target, shallow, prompt, k, 40, NO_EOS).tokens == reference


def noisy_twins(config: Path, seed: int) -> tuple[HFLM, HFLM]:
    """A tiny random target and a draft of the same shape and vocabulary whose weights are the
    target's plus 2 % noise (seeded): it agrees at some positions and not at many, so rounds
    accept every count from 0 to k. (Independent weights would agree almost nowhere: only the
    all-rejected pattern.) Weights ~ N(0, 0.3^2), not the usual 0.02^2, so the target's greedy
    text varies instead of repeating one token."""
    from transformers import AutoConfig

    from tests.checkpoints import noisy_pair

    target, draft = noisy_pair(AutoConfig.for_model(**{**json.loads(config.read_text()), "initializer_range": 0.3}), seed, 0.02)
    return HFLM(target), HFLM(draft)


@pytest.mark.parametrize("config", [DATA / "tiny-mistral-swa.json", Path(__file__).parents[1] / "cards/configs/tiny-llama.json"],
                         ids=["sliding-window", "dynamic-cache"])
def test_model_draft_that_disagrees_rolls_back_both_caches_exactly(config, one_thread):
    """A draft model with its own weights: rounds reject (the target's cache is cropped) and
    accept part of a proposal (the draft's cache too), on DynamicCache and on sliding-window
    layers (window 8, 120 tokens). spec == greedy == transformers' generate throughout, and
    every proposal is the draft's own greedy continuation computed afresh (its rolled-back
    cache held exactly the accepted tokens)."""
    target, draft = noisy_twins(config, seed=1)
    prompt, n, k = list(range(3, 15)), 120, 4
    expected = transformers_greedy(target, prompt, n)
    assert greedy_decode(target, prompt, n, NO_EOS).tokens == expected
    proposals = []

    class Watched(ModelDraft):
        def propose(self, tokens, k):
            proposal = super().propose(tokens, k)
            proposals.append((list(tokens), proposal.tolist()))
            return proposal

    spec = speculative_decode(target, Watched(draft, target.vocab_size), prompt, k, n, NO_EOS)
    assert spec.tokens == expected
    accepted = {r.accepted for r in spec.rounds if r.drafted == k}
    assert accepted == set(range(k + 1)), accepted  # none, some, all: every rollback of both caches
    assert 0 < spec.stats.accept_rate < 0.8
    assert len(proposals) == len(spec.rounds) and all(
        proposal == greedy_decode(draft, tokens, len(proposal), NO_EOS).tokens for tokens, proposal in proposals if proposal)


def test_early_exit_shares_weights_and_leaves_the_target_whole():
    target, _ = random_lm("tiny-mistral-swa.json")
    view = early_exit(target, 1)
    assert len(view.model.get_decoder().layers) == 1 and len(target.model.get_decoder().layers) == 3
    assert view.model.lm_head.weight is target.model.lm_head.weight
    assert target.config.num_hidden_layers == 3 and view.config.num_hidden_layers == 1
