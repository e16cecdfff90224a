"""Property-based tests (hypothesis): for random toy vocabularies, drafts and agreement, k,
max_tokens, EOS placements and prompt lengths, speculative == greedy == a cache-free
reference, never more than max_tokens, nothing after EOS, and the statistics add up."""

from __future__ import annotations

import json

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, OracleDraft, PromptLookupDraft
from specdec_cli.loop.schedule import AdaptiveK
from specdec_cli.engine.toy_model import ToyLM

from .conftest import toy_card_dict
from .toys import CacheWatch, NoisyToyLM, reference

CPU = torch.device("cpu")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTS = ["oracle", "noisy-model", "prompt-lookup", "adaptive-oracle", "adaptive-noisy-model"]


def make_draft(kind: str, target: ToyLM, agree: float, seed: int):
    base = kind.removeprefix("adaptive-")
    if base == "oracle":
        draft = OracleDraft(target.greedy_next, target.vocab_size, agree, seed, CPU, "toy")
    elif base == "noisy-model":
        draft = ModelDraft(NoisyToyLM(target, noise=1 - agree, salt=seed), target.vocab_size, "noisy")
    else:
        draft = PromptLookupDraft(CPU, max_ngram=3)
    return AdaptiveK(draft) if kind.startswith("adaptive-") else draft


@st.composite
def scenarios(draw):
    vocab = draw(st.integers(2, 71))
    max_tokens = draw(st.integers(1, 100))
    s = dict(
        vocab=vocab, seed=draw(st.integers(0, 2**16)), k=draw(st.integers(1, 12)), max_tokens=max_tokens,
        agree=draw(st.floats(0, 1)), draft=draw(st.sampled_from(DRAFTS)), draft_seed=draw(st.integers(0, 2**16)),
        prompt=draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=48)),
    )
    # EOS: none, the reference's token at a chosen position (so it lands there or earlier),
    # or arbitrary ids (possibly never produced)
    s["eos_rule"] = draw(st.one_of(st.none(), st.integers(0, max_tokens - 1).map(lambda i: ("at", i)),
                                   st.sets(st.integers(0, vocab - 1), max_size=3).map(lambda ids: ("ids", ids))))
    return s


def check_run(target, spec, prompt, k, max_tokens, eos, expected) -> None:
    tokens, rounds, s = spec.tokens, spec.rounds, spec.stats
    assert tokens == expected
    assert len(tokens) <= max_tokens
    assert not any(t in eos for t in tokens[:-1])  # nothing after EOS
    assert len(tokens) == max_tokens or tokens[-1] in eos  # stops early only at EOS
    # statistics add up
    assert s.tokens == len(tokens) == sum(r.emitted for r in rounds)
    assert s.verify_rounds == len(rounds) and s.target_forwards == s.verify_rounds + (len(prompt) > 1)
    assert s.drafted == sum(r.drafted for r in rounds) and s.accepted == sum(r.accepted for r in rounds)
    assert s.accepted <= s.drafted
    emitted = 0
    for r in rounds:
        assert 0 <= r.accepted <= r.drafted <= min(k, max_tokens - emitted - 1)  # never drafts past the end
        emitted += r.emitted
    assert all(r.emitted == r.accepted + 1 for r in rounds[:-1])  # accepted + correction/bonus
    last = rounds[-1]
    trim = last.accepted + 1 - last.emitted  # the last round is cut at EOS / max_tokens
    assert 0 <= trim <= last.accepted
    assert s.tokens == s.accepted + s.verify_rounds - trim
    assert all(0 <= a <= 1 for a in s.accept_by_position) and len(s.accept_by_position) <= k


@FAST
@given(scenarios())
def test_speculative_equals_greedy_for_random_toys(s):
    target = ToyLM(s["vocab"], s["seed"])
    full = reference(target, s["prompt"], s["max_tokens"])
    rule = s["eos_rule"]
    eos = frozenset() if rule is None else frozenset([full[rule[1]]]) if rule[0] == "at" else frozenset(rule[1])
    expected = reference(target, s["prompt"], s["max_tokens"], eos)
    if rule and rule[0] == "at":
        assert len(expected) <= rule[1] + 1
    greedy = greedy_decode(target, s["prompt"], s["max_tokens"], eos)
    assert greedy.tokens == expected and greedy.stats.verify_rounds == len(expected)
    watch = CacheWatch(target)
    draft = make_draft(s["draft"], target, s["agree"], s["draft_seed"])
    spec = speculative_decode(watch, draft, s["prompt"], s["k"], s["max_tokens"], eos)
    check_run(target, spec, s["prompt"], s["k"], s["max_tokens"], eos, expected)
    # the target's cache holds every token but the last at the top of every round
    verify_calls = watch.calls[len(s["prompt"]) > 1:]
    done = 0
    for (cached, fed), r in zip(verify_calls, spec.rounds):
        assert cached == len(s["prompt"]) - 1 + done and fed == r.drafted + 1
        done += r.emitted


@settings(max_examples=25, deadline=None)
@given(agree=st.sampled_from([0.0, 0.3, 0.7, 1.0]), k=st.integers(1, 10), max_tokens=st.integers(1, 80),
       words=st.lists(st.sampled_from(["ba", "be", "bi", "do", "ku", "zu"]), min_size=1, max_size=12))
def test_cli_generate_json_properties(tmp_path_factory, agree, k, max_tokens, words):
    """The same properties through the CLI's JSON contract."""
    import yaml
    from typer.testing import CliRunner

    from specdec_cli.cli import app

    path = tmp_path_factory.mktemp("card") / "card.yaml"
    path.write_text(yaml.safe_dump(toy_card_dict(agree=agree)))
    r = CliRunner().invoke(app, ["generate", "-c", str(path), "--json", "-k", str(k), "-n", str(max_tokens), " ".join(words)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)
    spec, greedy, rounds = obj["spec"], obj["greedy"], obj["spec"]["rounds"]
    assert obj["identical"] is True and spec["tokens"] == greedy["tokens"]
    assert len(spec["tokens"]) <= max_tokens and 0 not in spec["tokens"][:-1]  # the toy's EOS is 0
    m = spec["metrics"]
    assert m["accepted"] <= m["drafted"] and all(x["drafted"] <= k for x in rounds)
    trim = rounds[-1]["accepted"] + 1 - rounds[-1]["emitted"]
    assert m["tokens"] == m["accepted"] + m["verify_rounds"] - trim
