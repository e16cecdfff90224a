"""Long runs: thousands of tokens with rounds that accept every count 0..k, so the KV caches
are rolled back in every pattern, and spec == greedy throughout."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specdec_cli.cards.card import load_card
from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, OracleDraft, SyntheticDraft
from specdec_cli.loop.schedule import AdaptiveK
from specdec_cli.engine.models import load, parse_ref
from specdec_cli.pair.loading import load_pair
from specdec_cli.engine.toy_model import ToyLM

from .conftest import DATA, transformers_greedy
from .toys import CacheWatch, NoisyToyLM, reference

NO_EOS = frozenset()
CPU = torch.device("cpu")
K = 6
TOKENS = 3000


def assert_every_rollback_pattern(rounds, k: int) -> Counter:
    """Every accepted count 0..k occurs (full rounds only: the last one is cut at the end)."""
    counts = Counter(r.accepted for r in rounds if r.drafted == k)
    assert set(counts) == set(range(k + 1)), counts
    return counts


def assert_cache_invariant(watch: CacheWatch, prompt: list[int], rounds) -> None:
    """At the top of every round the target's cache holds every token but the last."""
    calls, done = watch.calls[len(prompt) > 1:], 0
    assert len(calls) == len(rounds)
    for (cached, fed), r in zip(calls, rounds):
        assert (cached, fed) == (len(prompt) - 1 + done, r.drafted + 1)
        done += r.emitted


@pytest.mark.parametrize("draft_kind", ["oracle", "noisy-model", "adaptive-noisy-model"])
def test_toy_soak_thousands_of_tokens(draft_kind):
    target = ToyLM(vocab=64, seed=11)
    prompt = [5, 17, 3, 42]
    expected = reference(target, prompt, TOKENS)  # no cache at all
    if draft_kind == "oracle":
        draft = OracleDraft(target.greedy_next, 64, 0.75, 3, CPU, "toy")
    else:
        draft = ModelDraft(NoisyToyLM(target, noise=0.25), 64, "noisy")  # its own cache, rolled back too
        draft = AdaptiveK(draft) if draft_kind.startswith("adaptive") else draft
    watch = CacheWatch(target)
    spec = speculative_decode(watch, draft, prompt, K, TOKENS, NO_EOS)
    assert len(spec.tokens) == TOKENS
    assert spec.tokens == expected == greedy_decode(target, prompt, TOKENS, NO_EOS).tokens
    if draft_kind == "adaptive-noisy-model":  # adaptive rounds vary in length: every length 1..K is used
        assert {r.drafted for r in spec.rounds[:-1]} == set(range(1, K + 1))
        assert any(r.accepted == r.drafted == K for r in spec.rounds) and any(r.accepted == 0 for r in spec.rounds)
    else:
        assert min(assert_every_rollback_pattern(spec.rounds, K).values()) >= 5
    assert_cache_invariant(watch, prompt, spec.rounds)


def test_sliding_window_model_soak_every_rollback_pattern(one_thread):
    """A real transformers cache with sliding-window layers (window 8) under every rollback
    0..k, hundreds of rounds long, against transformers' own greedy generate."""
    target, _ = load(parse_ref("random:tiny-mistral-swa.json", DATA), CPU, torch.float32)
    prompt, n = list(range(3, 11)), 480  # within the 512-position window
    expected = transformers_greedy(target, prompt, n)
    draft = SyntheticDraft({tuple(prompt): expected}, target.vocab_size, 0.7, 5, CPU, "synthetic")
    spec = speculative_decode(target, draft, prompt, 5, n, NO_EOS)
    assert spec.tokens == expected
    assert_every_rollback_pattern(spec.rounds, 5)


def test_one_pair_serves_many_interleaved_requests():
    """Per-request state never leaks: 40 requests alternating prompts and modes on one resident
    Pair give what each gives alone."""
    pair = load_pair(load_card("toy"))
    prompts = [pair.encode(text, 200) for text in ("ba be", "di do du", "ka", "mo mu me mi")]
    alone = {tuple(p): reference(pair.target, p, 200, pair.eos) for p in prompts}
    for i in range(40):
        p = prompts[i % len(prompts)]
        result = pair.spec(p, 1 + i % 8, 200) if i % 3 else pair.greedy(p, 200)
        assert result.tokens == alone[tuple(p)]
