"""The `features` draft (EAGLE-style, features.py) and `specdec distill` (distill.py), on the
tiny random Llama (cards/configs/tiny-llama.json: 4 layers, hidden 64, bytes as tokens).

A random model's greedy continuations fall into loops after a few tokens: a deterministic
target the draft can learn to near 1.0 in a few seconds of training."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_cli.loop.protocol import Draft
from specdec_cli.loop.tree import check
from specdec_cli.training import distill as D
from specdec_cli.drafts import features_block as features
from specdec_cli.cards.card import DraftSpec, load_card
from specdec_cli.loop.decoding import decode_rows, greedy_decode, speculative_decode
from specdec_cli.drafts import FeatureDraft
from specdec_cli.pair.loading import build_draft, load_pair
from specdec_cli.cards.prompts import SUITE, Prompt
from specdec_cli.loop.sampling import Sampling, sample_decode, speculative_sample
from specdec_cli.eval.stattest import homogeneity
from specdec_cli.training.selfprompts import opening, self_prompts
from specdec_cli.training.traindata import spread
from specdec_cli.training.trainprompts import training_prompts
from specdec_cli.engine.taps import FINAL, ONLY_FINAL
from specdec_cli.errors import SpecdecError

from .test_errors import assert_one_error

ROOT = Path(__file__).resolve().parents[1]
TINY = json.loads((ROOT / "cards/configs/tiny-llama.json").read_text())
WORDS = "the cat dog sat ran on a mat hat big small red blue".split()
NO_EOS = frozenset()


def tiny_card(folder: Path, config: dict = TINY, draft: dict | None = None, name: str = "tiny") -> Path:
    (folder / f"{name}.json").write_text(json.dumps(config))
    card = {"description": "tiny random llama", "target": f"random:{name}.json",
            "draft": draft or {"kind": "prompt-lookup"}, "decoding": {"k": 4, "max_tokens": 40}, "device": "cpu"}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(card))
    return path


def word_prompts(n: int, seed: int = 0) -> list[Prompt]:
    r = random.Random(seed)
    return [Prompt(f"p{i}", " ".join(r.choice(WORDS) for _ in range(r.randint(2, 6)))) for i in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A draft distilled for 120 steps on the tiny target, from random weights (no linear warm
    start, which alone gets this target's loops right): (pair, outcome, progress reports)."""
    folder = tmp_path_factory.mktemp("distilled")
    torch.set_num_threads(1)
    pair = load_pair(load_card(str(tiny_card(folder))))
    reports = []
    s = D.Settings(steps=120, max_new_tokens=64, heldout=8, eval_every=40, batch=8, lr=3e-3, warmup=10,
                   warm_start=False)
    outcome = D.distill(pair, word_prompts(40), s, folder / "out", "specdec distill (test)", "word prompts",
                        reports.append)
    return pair, outcome, reports


@pytest.fixture(scope="module")
def tapped(tmp_path_factory):
    """As `trained`, with taps (low, middle and final layers, as EAGLE-3 fuses them): `fuse` from
    random weights too. (pair, outcome, progress reports)."""
    folder = tmp_path_factory.mktemp("tapped")
    torch.set_num_threads(1)
    pair = load_pair(load_card(str(tiny_card(folder))))
    reports = []
    s = D.Settings(steps=120, max_new_tokens=64, heldout=8, eval_every=40, batch=8, lr=3e-3, warmup=10,
                   warm_start=False, taps=(1, 2, FINAL))
    outcome = D.distill(pair, word_prompts(40), s, folder / "out", "specdec distill (test)", "word prompts",
                        reports.append)
    return pair, outcome, reports


def draft_of(pair, outcome):
    return build_draft(DraftSpec(kind="features", weights=str(outcome.weights), schedule="fixed"), pair)


# ---------------------------------------------------------------------------- features, asked for
def test_a_forward_asked_for_features_returns_them_with_bit_identical_logits(tmp_path):
    lm = load_pair(load_card(str(tiny_card(tmp_path)))).target
    ids = torch.tensor([[5, 9, 77, 3, 120, 8]])
    plain = lm.forward(ids, lm.new_cache())
    cache = lm.new_cache()
    kept, hidden = lm.forward(ids, cache, features=ONLY_FINAL)
    assert torch.equal(plain, kept)
    assert hidden.shape == (6, 64)
    with torch.no_grad():
        decoder = lm.model.get_decoder()(input_ids=ids).last_hidden_state[0]
        assert torch.equal(hidden, decoder)
        assert torch.allclose(lm.model.get_output_embeddings()(hidden), kept, atol=1e-5)
    logits, hidden = lm.forward(torch.tensor([[4, 4]]), cache, keep=1, features=ONLY_FINAL)  # keep=1: every fed position
    assert hidden.shape == (2, 64) and logits.shape[0] == 1
    assert not isinstance(lm.forward(torch.tensor([[4]]), cache), tuple)  # not asked: logits only, nothing kept


# ---------------------------------------------------------------------------- distill learns
def test_distilling_lowers_the_loss_and_raises_held_out_acceptance_to_near_one(trained):
    _, outcome, reports = trained
    train = [r for r in reports if r.phase == "train"]
    assert max(train[0].alpha) < 0.1  # untrained: the draft guesses
    losses = [r.loss for r in train if r.loss is not None]
    # cross-entropy against the target's distribution: its entropy (about 6.2 nats here) is the floor
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.3
    assert outcome.alpha[0] >= 0.75 and min(outcome.alpha[1:]) >= 0.95, outcome.alpha  # loops: near 1.0
    assert outcome.steps == 120 and outcome.prompts == 32 and outcome.heldout == 8


def test_a_forward_asked_for_taps_returns_those_layers_side_by_side(tmp_path):
    lm = load_pair(load_card(str(tiny_card(tmp_path)))).target
    ids = torch.tensor([[5, 9, 77, 3, 120, 8]])
    plain = lm.forward(ids, lm.new_cache())
    logits, hidden = lm.forward(ids, lm.new_cache(), features=(3, 1, FINAL))
    assert torch.equal(plain, logits) and hidden.shape == (6, 3 * 64)
    with torch.no_grad():
        decoder = lm.model.get_decoder()
        x = decoder.embed_tokens(ids)
        states = decoder(input_ids=ids, output_hidden_states=True)
        after = [x] + [states.hidden_states[n] for n in (1, 2, 3)]  # the residual stream after n layers
        assert torch.equal(hidden[:, :64], after[3][0]) and torch.equal(hidden[:, 64:128], after[1][0])
        assert torch.equal(hidden[:, 128:], states.last_hidden_state[0])


def test_distilling_with_taps_learns_from_the_fused_layers_and_stays_exact(tapped):
    pair, outcome, reports = tapped
    train = [r for r in reports if r.phase == "train"]
    losses = [r.loss for r in train if r.loss is not None]
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.3
    assert outcome.alpha[0] >= 0.75 and min(outcome.alpha[1:]) >= 0.9, outcome.alpha
    block, _, meta = features.load(outcome.weights, pair.target)
    assert block.cfg.taps == (1, 2, FINAL) and json.loads(meta["config"])["taps"] == [1, 2, FINAL]
    assert block.fuse.weight.shape == (64, 3 * 64)
    draft = draft_of(pair, outcome)
    assert draft.reads_features == (1, 2, FINAL)
    accepted = 0
    for text in ["the cat sat", "big red dog ran on a mat", "x"]:
        prompt = pair.tokenizer.encode(text)
        greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
        for k in (1, 4):
            spec = speculative_decode(pair.target, draft, prompt, k, 40, NO_EOS)
            assert spec.tokens == greedy, (text, k)
            accepted += spec.stats.accepted
    assert accepted > 60  # and it is not exact by proposing nothing


def test_a_file_without_taps_reads_the_final_hidden_state_alone(trained, tmp_path):
    from safetensors.torch import load_file, save_file

    pair, outcome, _ = trained
    meta = features.read_header(outcome.weights)
    config = json.loads(meta["config"])
    assert config.pop("taps") == [FINAL]
    old = tmp_path / "old.safetensors"  # as the files written before taps were
    save_file(load_file(str(outcome.weights)), str(old), metadata={**meta, "config": json.dumps(config)})
    block, _, _ = features.load(old, pair.target)
    assert block.cfg.taps == (FINAL,) and block.fuse is None
    bad = tmp_path / "bad.safetensors"
    save_file(load_file(str(outcome.weights)), str(bad), metadata={**meta, "config": json.dumps({**config, "taps": [9, -1]})})
    with pytest.raises(SpecdecError, match=r"metadata 'config': tap 9 is not a layer count in 1\.\.4 or -1"):
        features.load(bad, pair.target)


def test_a_batch_cached_for_the_final_tap_is_retapped_to_what_generate_computes(tmp_path):
    from specdec_cli.training import traindata

    torch.set_num_threads(1)
    pair = load_pair(load_card(str(tiny_card(tmp_path))))
    batch = [pair.tokenizer.encode(p.text) for p in word_prompts(5)]
    made = traindata.continuations(pair, batch, 12, (2, FINAL))
    again = [traindata.Sequence(q.ids, q.prompt_len, False, None, q.labels) for q in made]
    traindata.retap(pair, again, (2, FINAL), rows=2)
    for q, r in zip(made, again):
        assert q.features.shape == r.features.shape == (len(q.ids), 128)
        torch.testing.assert_close(q.features.float(), r.features.float(), atol=2e-2, rtol=1e-2)


def test_make_data_retaps_a_batch_cached_for_the_final_tap_and_then_reads_its_own(tmp_path, monkeypatch):
    from specdec_cli.training import traindata

    torch.set_num_threads(1)
    pair = load_pair(load_card(str(tiny_card(tmp_path))))
    prompts, fp = word_prompts(12), features.fingerprint(pair.target)

    def make(taps):
        return traindata.make_data(pair, prompts, 2, None, 4, 8, fp, None, lambda *a: None, taps)

    final = make(ONLY_FINAL)  # generated, cached
    generated = []
    monkeypatch.setattr(traindata, "continuations", lambda *a, **kw: generated.append(a) or [])
    tapped = make((2, FINAL))  # re-tapped from the final tap's batches: nothing generated
    assert not generated and [q.ids for q in tapped] == [q.ids for q in final]
    assert all(q.features.shape == (len(q.ids), 128) for q in tapped)
    for q, r in zip(final, tapped):
        torch.testing.assert_close(r.features[:, 64:].float(), q.features.float(), atol=2e-2, rtol=1e-2)
    retapped = []
    monkeypatch.setattr(traindata, "retap", lambda *a, **kw: retapped.append(a))
    again = make((2, FINAL))  # its own batches now
    assert not generated and not retapped
    assert all(torch.equal(q.features, r.features) for q, r in zip(tapped, again))


@pytest.mark.parametrize("share", [0.25, 0.1, 0.5, 0.0])
def test_the_decay_starts_where_a_clock_run_reached_its_decay_time(share):
    for reached in range(0, 400):
        total = D.steps_decaying_from(reached, share)
        assert D.decay_start(total, share) == reached and total >= reached
        assert total - reached == int(total * share)  # the decay is `share` of the run, rounded down


def test_the_learning_rate_warms_up_holds_and_decays_to_zero_at_the_last_step():
    s = D.Settings(lr=1e-3, warmup=10, decay=0.25)
    rates = [D.learning_rate(s, step, 100) for step in range(100)]
    assert rates[0] == pytest.approx(1e-4) and rates[9] == pytest.approx(1e-3)
    assert rates[10:76] == [pytest.approx(1e-3)] * 66  # steps 10..75 hold; the decay starts at 75
    assert all(a > b > 0 for a, b in zip(rates[75:], rates[76:]))
    assert rates[99] == pytest.approx(1e-3 / 25)  # one step short of 0: every step trains
    assert D.learning_rate(s, 50, None) == 1e-3  # a clock run before its decay time: no total yet


def test_a_clock_run_is_replayed_exactly_by_its_prompts_and_steps(tmp_path):
    torch.set_num_threads(1)
    pair = load_pair(load_card(str(tiny_card(tmp_path))))
    s = D.Settings(minutes=0.2, max_new_tokens=16, heldout=4, eval_every=10**6, batch=4, lr=3e-3, warmup=5,
                   warm_start=False, gen_batch=8)
    clock = D.distill(pair, word_prompts(200), s, tmp_path / "clock", "x", "word prompts")
    assert clock.steps > 8 and clock.best_step == clock.steps, clock  # it trained, and the end was its best
    replay = D.distill(pair, word_prompts(200), replace(s, steps=clock.steps, prompts=clock.prompts),
                       tmp_path / "replay", "x", "word prompts")
    a, _, _ = features.load(clock.weights, pair.target)
    b, _, _ = features.load(replay.weights, pair.target)
    assert replay.alpha == clock.alpha and replay.tokens == clock.tokens
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_the_saved_file_round_trips(trained, tmp_path):
    pair, outcome, _ = trained
    block, ids, meta = features.load(outcome.weights, pair.target)
    assert meta["format"] == features.FORMAT and meta["fingerprint"] == features.fingerprint(pair.target)
    assert meta["target"] == pair.card.target and json.loads(meta["steps"]) == outcome.best_step
    assert json.loads(meta["alpha"]) == [round(a, 4) for a in outcome.alpha]
    assert meta["command"] == "specdec distill (test)" and json.loads(meta["tokens"]) == outcome.tokens
    again = tmp_path / "again.safetensors"
    features.save(again, block, ids, {k: v for k, v in meta.items() if k not in ("format", "config")})
    block2, ids2, meta2 = features.load(again, pair.target)
    assert meta2 == meta and torch.equal(ids, ids2)
    assert all(torch.equal(a, b) for a, b in zip(block.state_dict().values(), block2.state_dict().values()))


def test_the_draft_shares_the_targets_embedding_and_head(trained):
    pair, outcome, _ = trained
    draft = draft_of(pair, outcome)
    model = pair.target.model
    assert draft.embed is model.get_input_embeddings()
    assert draft.head.prefix and draft.head.weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert draft.reads_features and not hasattr(pair.target, 'keep_hidden')  # asked per forward, not switched on


# ---------------------------------------------------------------------------- exactness
def test_trained_draft_keeps_speculative_equal_to_greedy(trained):
    pair, outcome, _ = trained
    draft = draft_of(pair, outcome)
    accepted = 0
    for text in ["the cat sat", "big red dog ran on a mat", "x", "zebra quantum"]:
        prompt = pair.tokenizer.encode(text)
        greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
        for k in (1, 2, 4, 8):
            spec = speculative_decode(pair.target, draft, prompt, k, 40, NO_EOS)
            assert spec.tokens == greedy, (text, k)
            accepted += spec.stats.accepted
    assert accepted > 100  # and it is not exact by proposing nothing


@pytest.mark.parametrize("width, trees", [(None, False), (9, False), (None, True), (9, True)],
                         ids=["free", "pinned", "free-trees", "pinned-trees"])
def test_rows_of_a_batch_each_draft_from_their_own_hidden_states_and_equal_greedy(trained, width, trees):
    """--batch N with a features draft: each row's fork drafts from the hidden states of its own
    row of the verify (rows of different lengths, entering as others finish), and every row is
    that prompt's greedy output; the head's proposals are accepted as they are at batch 1."""
    pair, outcome, _ = trained
    texts = ["the cat sat", "big red dog ran on a mat", "x", "zebra quantum", "a mat", "red hat"]
    prompts = [pair.tokenizer.encode(t) for t in texts]
    draft = draft_of(pair, outcome)
    alone = [speculative_decode(pair.target, draft, p, 8, 40, NO_EOS, width=width, trees=trees) for p in prompts]
    rows = dict(decode_rows(pair.target, draft, prompts, 8, 40, NO_EOS, batch=3, width=width, trees=trees))
    assert [rows[i].tokens for i in range(len(prompts))] == [a.tokens for a in alone] == \
        [greedy_decode(pair.target, p, 40, NO_EOS, width=width).tokens for p in prompts]
    accepted = sum(rows[i].stats.accepted for i in rows)
    assert accepted > 100 and accepted >= 0.9 * sum(a.stats.accepted for a in alone)


def test_generate_batch_with_a_features_draft(run, trained, tmp_path):
    _, outcome, _ = trained
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": t, "prompt": t}) + "\n" for t in ["the cat sat", "x", "a big mat"]))
    r = run("generate", "-c", outcome.card, "--prompts-file", prompts, "--batch", "2", "-n", "24", "--json")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [line["id"] for line in lines[:3]] == ["the cat sat", "x", "a big mat"]
    assert all(line["identical"] for line in lines[:3]) and sum(line["spec"]["metrics"]["accepted"] for line in lines[:3]) > 0


def test_a_tree_node_drafts_as_the_chain_through_it_would(trained):
    """FeatureBlock.branch: m nodes at one depth, each over the true pairs and its own ancestors,
    give what `step` gives on the chain through each (float32: to rounding)."""
    pair, outcome, _ = trained
    draft = draft_of(pair, outcome)
    block, H = draft.block, draft.block.cfg.hidden
    torch.manual_seed(0)
    feats, toks = torch.randn(6, H), torch.randint(0, 8, (6,))
    with torch.inference_mode():
        cache = features.BlockCache(block.cfg, "cpu", torch.float32)
        block.step(feats, draft.embed(toks), cache)
        cache.length = 6
        h, embeds = torch.randn(2, H), draft.embed(torch.tensor([3, 5]))
        out, k1, v1 = block.branch(h, embeds, cache, cache.k[:, :, :0].expand(2, -1, -1, -1),
                                   cache.v[:, :, :0].expand(2, -1, -1, -1))
        deeper, _, _ = block.branch(out, draft.embed(torch.tensor([4, 4])), cache, k1, v1)
        for row in range(2):  # each node's chain, written into the cache as drafting writes it
            chain = features.BlockCache(block.cfg, "cpu", torch.float32)
            block.step(feats, draft.embed(toks), chain)
            chain.length = 6
            first = block.step(h[row:row + 1], embeds[row:row + 1], chain)
            chain.length = 7
            second = block.step(first, draft.embed(torch.tensor([4])), chain)
            torch.testing.assert_close(out[row:row + 1], first)
            torch.testing.assert_close(deeper[row:row + 1], second)


def test_a_grown_tree_of_one_branch_is_the_greedy_chain_and_trees_stay_exact(trained, monkeypatch):
    pair, outcome, _ = trained
    prompt = pair.tokenizer.encode("big red dog ran on a mat")
    greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
    for k in (2, 4, 8):
        draft = draft_of(pair, outcome)
        spec = speculative_decode(pair.target, draft, prompt, k, 40, NO_EOS, trees=True)
        assert spec.tokens == greedy, k
        assert any(r.depth is not None and r.depth < r.drafted for r in spec.rounds)  # real trees, wider than deep
    one, chain = draft_of(pair, outcome), draft_of(pair, outcome)
    monkeypatch.setattr(type(one), "BEAM", 1)
    with torch.inference_mode():
        for d in (one, chain):
            d.begin(prompt)  # the prompt's features from a scratch forward
        ids, parents = one.propose_tree(prompt, 5)
        assert ids.tolist() == chain.propose(prompt, 5).tolist() and parents == (0, 1, 2, 3, 4)


# ---------------------------------------------------------------------------- draft.lookup
def copying_draft_of(pair, outcome, n: int = 3):
    return build_draft(DraftSpec(kind="features", weights=str(outcome.weights), schedule="fixed", lookup=n), pair)


def test_lookup_copies_what_followed_a_repeated_ngram_and_leaves_other_rounds_to_the_head(trained):
    pair, outcome, _ = trained
    repeated = list(b"dog cat cat")  # bytes are the tiny target's ids
    unique = list(b"abcdefgh")  # no 2-gram occurs twice
    copying, plain = copying_draft_of(pair, outcome), draft_of(pair, outcome)
    with torch.inference_mode():
        for d in (copying, plain):
            d.begin(repeated)
        assert copying.propose(repeated, 4).tolist() == list(b" cat")  # what followed "cat" (3 tokens) before
        assert copying.context_key(repeated, 4) == 3 and copying.forwards == 0  # a copy runs no block
        copying.begin(repeated)  # each proposal below is a round of its own
        ids, parents = copying.propose_tree(repeated, 8)
        assert ids[:4].tolist() == list(b" cat") and parents[:4] == (0, 1, 2, 3)  # the copy is the first chain
        assert 4 < len(ids) <= 8 and copying.forwards > 0  # the head's tree grafted on where there was room
        check(parents)
        copying.begin(repeated)
        tokens, q = copying.propose_sampled(repeated, 4, None, None)
        assert tokens.tolist() == list(b" cat") and q is None  # deterministic: the loop makes q one-hot
        for d in (copying, plain):
            d.begin(unique)
        assert copying.propose(unique, 4).tolist() == plain.propose(unique, 4).tolist()  # no match: the head
        assert copying.context_key(unique, 4) == 0


def test_lookup_keeps_speculative_equal_to_greedy_with_fewer_block_calls(trained):
    pair, outcome, _ = trained
    for trees in (False, True):
        copying, plain = copying_draft_of(pair, outcome), draft_of(pair, outcome)
        for text in ["the cat sat on the mat", "big red dog ran on a mat", "x"]:
            prompt = pair.tokenizer.encode(text)
            greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
            for k in (2, 4, 8):
                assert speculative_decode(pair.target, copying, prompt, k, 40, NO_EOS, trees=trees).tokens == greedy
                speculative_decode(pair.target, plain, prompt, k, 40, NO_EOS, trees=trees)
        assert copying.forwards < plain.forwards, trees  # the random target's loops are copied


@pytest.mark.parametrize("trees", [False, True])
def test_sampling_with_copied_rounds_matches_plain_sampling(trained, trees, monkeypatch):
    """Three tokens drawn after a prompt whose last 3 tokens occurred before (the first round
    copies, deterministic; later rounds may sample from the head), against plain sampling: the
    same distribution (chi-square); a loop that takes the target's argmax instead of its draws fails."""
    pair, outcome, _ = trained
    prompt, warped = list(b"dog cat cat"), Sampling(temperature=0.8, top_k=4)
    prefix = pair.prefill(prompt)
    copying = copying_draft_of(pair, outcome)

    def draws(spec: bool, n: int, seed: int) -> Counter:
        g = torch.Generator().manual_seed(seed)
        if spec:
            return Counter(tuple(speculative_sample(pair.target, copying, prompt, 4, 3, NO_EOS, warped, g, prefix,
                                                    trees=trees).tokens) for _ in range(n))
        return Counter(tuple(sample_decode(pair.target, prompt, 3, NO_EOS, warped, g).tokens) for _ in range(n))

    plain = draws(False, 1200, 1)
    assert homogeneity(draws(True, 1200, 2), plain).p_value >= 1e-3
    monkeypatch.setattr("specdec_cli.loop.sampling.sample", lambda probs, g: probs.argmax(-1))
    assert homogeneity(draws(True, 300, 2), plain).p_value < 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(0, 255), min_size=1, max_size=12), k=st.integers(1, 8),
       max_tokens=st.integers(1, 30), eos=st.sets(st.integers(0, 255), max_size=3))
def test_property_speculative_equals_greedy(trained, prompt, k, max_tokens, eos):
    pair, outcome, _ = trained
    draft = draft_of(pair, outcome)
    eos = frozenset(eos)
    assert speculative_decode(pair.target, draft, prompt, k, max_tokens, eos).tokens == \
        greedy_decode(pair.target, prompt, max_tokens, eos).tokens


def test_a_reduced_vocabulary_never_proposes_outside_it_and_stays_exact(trained):
    pair, outcome, _ = trained
    block, _, meta = features.load(outcome.weights, pair.target)
    subset = torch.tensor(sorted(set(range(0, 512, 3)) | set(pair.tokenizer.encode("the cat sat on a mat"))))
    draft = FeatureDraft(pair.target, block, subset)
    assert not draft.head.prefix  # a gathered N-row head
    prompt = pair.tokenizer.encode("the cat sat")
    greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
    assert speculative_decode(pair.target, draft, prompt, 4, 40, NO_EOS).tokens == greedy
    pair.target.forward(torch.tensor([prompt[:-1]]), pair.target.new_cache())  # the prefill it reads
    draft.begin(prompt)
    warp = Sampling(0.8).warp
    tokens, q = draft.propose_sampled(prompt, 4, warp, torch.Generator().manual_seed(0))
    assert q.shape == (4, 512) and torch.allclose(q.sum(-1), torch.ones(4))
    outside = torch.ones(512, dtype=torch.bool)
    outside[subset] = False
    assert q[:, outside].abs().sum() == 0 and all(int(t) in set(subset.tolist()) for t in tokens)


def test_sampling_from_a_copied_prefill_and_a_stale_hidden_state(trained):
    """Many draws from one prefill (no prefill forward per draw), and a target forward made by
    someone else between propose and update: the draft notices and recomputes its features."""
    pair, outcome, _ = trained
    draft = draft_of(pair, outcome)
    prompt = pair.tokenizer.encode("the cat sat")
    prefix = pair.prefill(prompt)
    draws = [speculative_sample(pair.target, draft, prompt, 4, 20, NO_EOS, Sampling(0.7),
                                torch.Generator().manual_seed(s), prefix).tokens for s in range(3)]
    assert all(len(d) == 20 for d in draws)

    class Meddler(Draft):  # runs the target on something else right before every update
        name, forwards = "meddler", 0

        def begin(self, p, features=None): draft.begin(p)
        def propose(self, t, k): return draft.propose(t, k)

        def update(self, t, accepted, new=None, features=None):
            pair.target.forward(torch.tensor([[1, 2, 3]]), pair.target.new_cache())
            draft.update(t, accepted, new)

    greedy = greedy_decode(pair.target, prompt, 30, NO_EOS).tokens
    spec = speculative_decode(pair.target, Meddler(), prompt, 4, 30, NO_EOS)
    assert spec.tokens == greedy and spec.stats.accepted > 0


def test_step_seconds_measures_one_proposed_token(trained):
    pair, outcome, _ = trained
    seconds = draft_of(pair, outcome).step_seconds(list(range(1, 40)))
    assert 0 < seconds < 0.05


# ---------------------------------------------------------------------------- training prompts
def test_training_prompts_are_not_the_benchmark_prompts():
    texts = [p.text for p in training_prompts()]
    assert len(texts) == len(set(texts)) >= 1000
    for bench in SUITE:
        assert all(bench.text not in t and t not in bench.text for t in texts), bench.id


def test_spread_mixes_the_extra_prompts_evenly_and_keeps_both_orders():
    base, extra = word_prompts(9), [Prompt(f"s{i}", f"own {i}", "self") for i in range(3)]
    mixed = spread(base, extra)
    assert [p.id for p in mixed] == ["p0", "p1", "s0", "p2", "p3", "p4", "s1", "p5", "p6", "p7", "s2", "p8"]
    assert spread(base, []) == base


@pytest.mark.slow
def test_self_prompts_are_the_targets_own_requests_seeded_and_cached(smollm2_pair):
    pair = smollm2_pair
    first = self_prompts(pair, 6, seed=1, batch=8, max_new_tokens=40)
    texts = [p.text for p in first]
    assert len(texts) == len(set(texts)) == 6 and all(p.category == "self" and p.text.strip() == p.text for p in first)
    start = opening(pair.tokenizer)
    assert pair.tokenizer.tok.decode(start).endswith("<|im_start|>user\n")
    cached = list(Path(os.environ["XDG_CACHE_HOME"], "specdec", "distill").glob("self-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == texts
    cached[0].unlink()  # sampled again from the seed: the same requests
    assert [p.text for p in self_prompts(pair, 6, seed=1, batch=8, max_new_tokens=40)] == texts
    assert [p.text for p in self_prompts(pair, 6, seed=2, batch=8, max_new_tokens=40)] != texts


def test_self_prompts_need_a_chat_template(run, tmp_path):
    card = tiny_card(tmp_path)
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(p.text for p in word_prompts(12)))
    r = run("distill", "-c", card, "--prompts-file", prompts, "--steps", 5, "--out", tmp_path / "o", "--self-prompts", 4)
    assert_one_error(r, "command line: --self-prompts: the target's tokenizer has no chat template to open a user turn "
                        "with", alone=False)
    assert not (tmp_path / "o" / "model.safetensors").exists()


# ---------------------------------------------------------------------------- the CLI
def test_distill_cli_writes_weights_and_a_card_that_generates_exactly(run, tmp_path):
    card = tiny_card(tmp_path)
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(p.text for p in word_prompts(24)))
    out = tmp_path / "out"
    r = run("distill", "-c", card, "--prompts-file", prompts, "--steps", 30, "--out", out, "--seed", 3)
    assert r.exit_code == 0, r.stderr
    written = out / "tiny-features.yaml"
    assert r.stdout.strip() == str(written) and (out / "model.safetensors").is_file()
    assert "held-out acceptance by draft position" in r.stderr
    meta = features.read_header(out / "model.safetensors")
    assert meta["command"] == f"specdec distill -c {card} --minutes 30 --seed 3 --prompts-file {prompts} --steps 30"
    r = run("generate", "-c", written, "--mode", "both", "--json", "-n", "24", "the cat sat")
    assert r.exit_code == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["identical"] and result["spec"]["metrics"]["accepted"] > 0


def test_distill_cli_taps_name_the_layers_the_draft_reads(run, tmp_path):
    card = tiny_card(tmp_path)
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(p.text for p in word_prompts(12)))
    out = tmp_path / "out"
    r = run("distill", "-c", card, "--prompts-file", prompts, "--steps", 5, "--out", out, "--taps=2,-1")
    assert r.exit_code == 0, r.stderr
    meta = features.read_header(out / "model.safetensors")
    assert json.loads(meta["config"])["taps"] == [2, FINAL] and meta["command"].endswith(" --steps 5 --taps=2,-1")
    r = run("generate", "-c", out / "tiny-features.yaml", "--mode", "both", "--json", "-n", "16", "the cat sat")
    assert r.exit_code == 0 and json.loads(r.stdout)["identical"], r.stderr
    r = run("distill", "-c", card, "--prompts-file", prompts, "--steps", 5, "--out", tmp_path / "o2", "--taps=9,-1")
    assert_one_error(r, "command line: --taps: tap 9 is not a layer count in 1..4 or -1 (the final hidden state)",
                     alone=False)


@pytest.mark.parametrize("args, message", [
    (("--minutes", "0"), "command line: --minutes: must be a number > 0, got 0.0"),
    (("--minutes", "-5"), "command line: --minutes: must be a number > 0, got -5.0"),
    (("--out", "{file}"), "command line: --out: {file} exists and is not a folder"),
    (("--out", "{file}/sub"), "command line: --out: cannot write to {file}/sub: Not a directory"),
    (("--taps", "3,x"), "command line: --taps: must be layer counts separated by commas, e.g. 3,15,-1, got '3,x'"),
    (("--taps", "1,2"), "command line: --taps: must include -1 (the final hidden state, from which the draft "
                        "learns the target's distribution), got '1,2'"),
])
def test_distill_bad_input_fails_before_loading(run, tmp_path, monkeypatch, args, message):
    import specdec_cli.pair.loading as pair_mod
    import specdec_cli.pair.targets as targets

    for module in (pair_mod, targets):
        monkeypatch.setattr(module, "load", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("loaded a model")))
    file = tmp_path / "taken"
    file.write_text("")
    args = [a.replace("{file}", str(file)) for a in args]
    r = run("distill", "-c", tiny_card(tmp_path), *args)
    assert_one_error(r, message.replace("{file}", str(file)))


def test_weights_for_another_target_are_one_error_line(run, trained, tmp_path):
    _, outcome, _ = trained
    draft = {"kind": "features", "weights": str(outcome.weights)}
    narrow = tiny_card(tmp_path, {**TINY, "hidden_size": 32}, draft, name="narrow")
    r = run("generate", "-c", narrow, "ba")
    assert_one_error(r, f"{narrow}: draft.weights: {outcome.weights}: expects a target with hidden size 64 and "
                        f"vocabulary 512 (trained for random:tiny.json); this target has hidden size 32 and vocabulary 512",
                     alone=False)
    other = tiny_card(tmp_path, {**TINY, "initializer_range": 0.03}, draft, name="other")  # same shapes, other weights
    r = run("generate", "-c", other, "ba")
    fp = features.read_header(outcome.weights)["fingerprint"]
    assert r.exit_code == 2 and r.stdout == ""
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"Error: {other}: draft.weights: {outcome.weights}: was trained for target random:tiny.json "
                           f"with embedding fingerprint {fp[:12]}…; this target's is ")
    assert last.endswith("(a features draft fits one target: train one with specdec distill)")
