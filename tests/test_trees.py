"""Token trees (loop/tree.py, engine/trees.py): the walk that keeps the target's path, the tree
mask and positions in the KV cache, the moved K/V of an off-chain path, the drafts' trees
(prompt lookup's trie, the features head's comb), and speculative decoding with trees equal to
greedy token for token (batch 1 and 3) and to sampling in distribution."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from specdec_cli.loop.tree import comb, graft, settle
from specdec_cli.drafts.model_draft import ModelDraft, _agreed
from specdec_cli.drafts.lookup_draft import PromptLookupDraft, trie
from specdec_cli.engine.kvcache import KVCache, SerialCache
from specdec_cli.engine.models import HFLM
from specdec_cli.engine.trees import ancestry, depths, layout
from specdec_cli.errors import SpecdecError
from specdec_cli.loop.decoding import decode_rows, greedy_decode, speculative_decode
from specdec_cli.loop.protocol import Draft
from specdec_cli.loop.sampling import Sampling, sample_decode, speculative_sample
from specdec_cli.loop.tree import Proposal, walk
from specdec_cli.eval.stattest import homogeneity
from specdec_cli.engine.taps import ONLY_FINAL

from .conftest import parse_json_lines
from .test_decoding import noisy_twins

CPU = torch.device("cpu")
TINY_LLAMA = Path(__file__).parents[1] / "cards/configs/tiny-llama.json"


@pytest.fixture(scope="module")
def twins():
    torch.set_num_threads(1)
    return noisy_twins(TINY_LLAMA, seed=1)


# ---------------------------------------------------------------------------- the tree itself
def test_depths_and_ancestry_of_a_small_tree():
    parents = (0, 1, 0, 3, 1)  # slots 1..5: 1-2 a chain, 3-4 a branch off the root, 5 a sibling of 2
    assert depths(parents) == [0, 1, 2, 1, 2, 2]
    family = ancestry(parents)
    assert family[4].nonzero().flatten().tolist() == [0, 3, 4]
    assert family[5].nonzero().flatten().tolist() == [0, 1, 5]
    depth, fam = layout([parents], 8, CPU)  # two padding slots continue from slot 5 as a chain
    assert depth[0].tolist() == [0, 1, 2, 1, 2, 2, 3, 4]
    assert fam[0, 7].nonzero().flatten().tolist() == [0, 1, 5, 6, 7]


def test_walk_keeps_the_path_the_target_agrees_with():
    """Tree: root -> a(1) -> b(2); root -> c(3) -> d(4); a -> e(5). The target's tokens after each
    slot: after the root c, after c d, after d 9: the kept path is c, d (slots 3, 4) and 9."""
    proposal = Proposal(torch.tensor([10, 11, 12, 13, 14]), parents=(0, 1, 0, 3, 1))
    choice = torch.tensor([12, 0, 0, 13, 9, 0])  # [S]: the target's token after slot s
    n, emitted, path = walk(choice, proposal)
    assert int(n) == 2
    assert path[:3].tolist() == [0, 3, 4]
    assert emitted[:3].tolist() == [12, 13, 9]
    n, emitted, path = walk(torch.tensor([7, 0, 0, 0, 0, 0]), proposal)  # nothing agrees: the target's token
    assert (int(n), emitted[:1].tolist(), path[:1].tolist()) == (0, [7], [0])


def test_a_chain_walks_as_the_leading_run():
    chain = Proposal(torch.tensor([4, 5, 6]))
    n, emitted, path = walk(torch.tensor([4, 5, 8, 1]), chain)
    assert (int(n), emitted[:3].tolist(), path.tolist()) == (2, [4, 5, 8], [0, 1, 2, 3])


# ---------------------------------------------------------------------------- the drafts' trees
def test_prompt_lookup_trie_merges_every_match_best_first():
    """`1 2 3` occurred three times, followed by 4 5, 9 9 and 4 7: 4 (twice) comes first, and of
    4 5 and 4 7 the latest occurrence wins the tie; the best path is the first chain."""
    seq = [1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 1, 2, 3, 4, 7, 1, 2, 3]
    assert trie(seq, 6, 3, 1) == ([4, 7, 1, 5, 9, 9], (0, 1, 2, 1, 0, 5))
    assert trie(seq, 2, 3, 1) == ([4, 9], (0, 0))
    assert trie([5, 6, 7], 4, 3, 1) == ([], ())
    ids, parents = PromptLookupDraft(CPU).propose_tree(seq, 3)
    assert (ids.tolist(), parents) == ([4, 7, 9], (0, 1, 0))  # equal scores: the shallower node first


def test_features_comb_keeps_the_highest_cumulative_probabilities():
    """Chain 5, 6 (the argmax at each depth); siblings ranked by cumulative log-probability: the
    root's second choice (row 2, log 0.3) beats the chain's second token (0.6 * 0.5 = 0.3, tie:
    shallower first) and 0.6 * 0.4 at depth 2."""
    probs = torch.tensor([[0.6, 0.1, 0.3, 0.0], [0.05, 0.4, 0.5, 0.05]])
    ids = torch.tensor([5, 7, 9, 6])  # draft row -> target id
    chain = ids[probs.argmax(-1)]  # [5, 9]
    tokens, parents = comb(chain, probs.log(), 3, ids, 3)
    assert (tokens.tolist(), parents) == ([5, 9, 9], (0, 1, 0))  # 5 -> 9 the chain, 9 beside 5 at the root
    tokens, parents = comb(chain, probs.log(), 4, ids, 3)
    assert (tokens.tolist(), parents) == ([5, 9, 9, 7], (0, 1, 0, 1))


def test_settle_keeps_the_k_best_nodes_and_lays_the_best_chain_out_first():
    """Nodes (score, parent, token, depth) as a grown tree has them: the k best are kept, their
    parents always among them; the chain through each kept node's best child comes first."""
    nodes = [(-0.5, -1, 10, 1), (-1.2, -1, 11, 1), (-3.0, -1, 12, 1),  # the root's children
             (-0.9, 0, 20, 2), (-1.0, 0, 21, 2),  # 10's
             (-1.5, 1, 30, 2),  # 11's
             (-1.1, 3, 40, 3)]  # 20's
    assert settle(nodes, 3) == ([10, 20, 21], (0, 1, 1))
    assert settle(nodes, 5) == ([10, 20, 40, 11, 21], (0, 1, 2, 0, 1))  # 10 -> 20 -> 40, then by depth
    assert settle(nodes, 7) == ([10, 20, 40, 11, 12, 21, 30], (0, 1, 2, 0, 0, 1, 4))
    tied = [(-0.0, -1, 1, 1), (-0.0, 0, 2, 2), (-0.0, 1, 3, 3)]  # certain tokens: a parent ties its child
    assert settle(tied, 2) == ([1, 2], (0, 1))



def test_graft_lays_a_chain_out_first_and_merges_a_tree_into_it_by_path():
    """A copied chain 5 6 7 first; the head's tree (5 and 9 at the root, 6 under 5, 8 under
    that 6) merged by path: 5 and 5 -> 6 are the chain's slots, 9 and 5 -> 6 -> 8 new."""
    assert graft([5, 6, 7], [5, 9, 6, 8], (0, 0, 1, 3), 8) == ([5, 6, 7, 9, 8], (0, 1, 2, 0, 2))
    assert graft([5, 6, 7], [5, 9, 6, 8], (0, 0, 1, 3), 4) == ([5, 6, 7, 9], (0, 1, 2, 0))  # no room for 8
    assert graft([5, 6, 7], [9, 6, 8], (0, 1, 2), 4) == ([5, 6, 7, 9], (0, 1, 2, 0))  # room for 9, not for what hangs on it
    assert graft([], [5, 9, 6, 8], (0, 0, 1, 3), 8) == ([5, 9, 6, 8], (0, 0, 1, 3))  # no copy: the tree
    assert graft([1, 2], [], (), 8) == ([1, 2], (0, 1))


# ---------------------------------------------------------------------------- the cache's tree mask
def test_each_tree_slot_sees_its_path_as_a_plain_forward_would(twins):
    """Every slot's logits in a tree forward equal the last logits of a plain forward over the
    prompt and that slot's path (float32: to rounding)."""
    target, _ = twins
    prompt, parents, tokens = list(range(3, 15)), (0, 1, 0, 3, 1, 5), [40, 41, 42, 43, 44, 45]
    cache = KVCache(target)
    cache.add(prompt + [7])
    logits = cache.forward(torch.tensor([[7] + tokens]), trees=[parents])[0]
    family = ancestry(parents)
    for s in range(len(tokens) + 1):
        path = [([7] + tokens)[a] for a in family[s].nonzero().flatten().tolist()]
        alone = KVCache(target)
        alone.add(prompt + [path[0]])
        want = alone.forward(torch.tensor([path]))[0, -1]
        torch.testing.assert_close(logits[s], want, rtol=1e-4, atol=1e-4)  # a wrong mask or position is off by O(1)


def test_an_off_chain_path_is_moved_into_place(twins):
    """Keeping slots 0, 3, 4 moves their K/V to the row's next three columns: the next forward
    then gives what a cache fed that path plainly gives."""
    target, _ = twins
    prompt, parents, tokens = list(range(20, 30)), (0, 1, 0, 3), [50, 51, 52, 53]
    cache = KVCache(target)
    cache.add(prompt + [8])
    cache.forward(torch.tensor([[8] + tokens]), trees=[parents])
    cache.keep([3], [[0, 3, 4, 0, 0]])
    plain = KVCache(target)
    plain.add(prompt + [8])
    plain.forward(torch.tensor([[8, 52, 53]]))
    plain.keep([3])
    torch.testing.assert_close(cache.forward(torch.tensor([[60]])), plain.forward(torch.tensor([[60]])),
                               rtol=1e-4, atol=1e-4)  # a wrong mask or position is off by O(1)


def test_a_serial_cache_refuses_trees(twins):
    target, _ = twins
    with pytest.raises(SpecdecError, match="token trees need specdec's KV cache"):
        SerialCache(target).forward(torch.tensor([[1, 2]]), trees=[(0,)])


# ---------------------------------------------------------------------------- decoding with trees
class Branchy(Draft):
    """Knows the target's greedy output and proposes a tree whose first chain is wrong and whose
    second branch holds the next `right` true tokens (then a wrong one): every round keeps an
    off-chain path, so its K/V move."""

    trees = True

    def __init__(self, reference: list[int], prompt_len: int, vocab: int, right: int = 2):
        self.reference, self.prompt_len, self.vocab, self.right = reference, prompt_len, vocab, right
        self.offsets = []

    def propose(self, tokens, k):
        raise AssertionError("the loop asked a tree draft for a chain")

    def propose_tree(self, tokens, k):
        at = len(tokens) - self.prompt_len
        true = self.reference[at : at + min(self.right, k - 1)]
        if not true:
            return torch.empty(0, dtype=torch.long), ()
        ids = [(true[0] + 1) % self.vocab] + true  # slot 1: a wrong chain; slots 2..: the true branch
        self.offsets.append(len(ids))
        return torch.tensor(ids), (0, 0) + tuple(range(2, len(ids)))[: len(ids) - 2]


def test_speculative_with_trees_equals_greedy_and_keeps_off_chain_paths(twins):
    target, _ = twins
    prompt = list(range(3, 15))
    greedy = greedy_decode(target, prompt, 40, frozenset()).tokens
    draft = Branchy(greedy, len(prompt), target.vocab_size)
    result = speculative_decode(target, draft, prompt, 4, 40, frozenset(), trees=True)
    assert result.tokens == greedy
    assert sum(r.accepted == 2 for r in result.rounds) >= 10  # off-chain paths of two kept
    assert {(r.drafted, r.depth) for r in result.rounds if r.drafted == 3} == {(3, 2)}  # 3 nodes, 2 deep
    assert len(result.stats.drafted_at) == 2  # acceptance by position counts a tree's depth, not its nodes


class CheckedModelDraft(ModelDraft):
    """A model draft whose every tree round checks its drafted chain against a fresh draft's on
    the same tokens (its KV cache kept only what the kept path and its own chain share), and
    counts the rounds whose kept path left its chain for a sibling."""

    def __init__(self, lm, vocab):
        super().__init__(lm, vocab)
        self.rounds = self.off_chain = 0

    def propose_tree(self, tokens, k):
        fresh = ModelDraft(self.lm, self.shared_vocab)
        fresh.begin(tokens)
        expected = fresh.propose(tokens, k)
        out = super().propose_tree(tokens, k)
        assert self.chain is None or torch.equal(self.chain, expected), (self.chain, expected)
        self.rounds += bool(out[0].shape[0])
        return out

    def update(self, tokens, accepted, new=None, features=None):
        if self.chain is not None and accepted:
            self.off_chain += _agreed(self.chain, tokens[self.base:self.base + accepted]) < accepted
        super().update(tokens, accepted, new, features)


def test_a_model_draft_proposes_trees_and_keeps_its_cache_after_off_chain_paths(twins):
    """The noisy twin as a model draft, with trees: the output is greedy's; its chain's unlikely
    tails give way to its second choices (trees narrower than deep chains); after a round whose
    kept path took a sibling, the draft's cache holds only what it shares with that path (its
    next chain is a fresh draft's)."""
    target, noisy = twins
    prompt = list(range(3, 15))
    greedy = greedy_decode(target, prompt, 48, frozenset()).tokens
    draft = CheckedModelDraft(noisy, target.vocab_size)
    result = speculative_decode(target, draft, prompt, 4, 48, frozenset(), trees=True)
    assert result.tokens == greedy
    assert draft.rounds == len([r for r in result.rounds if r.drafted]) > 5
    assert any(r.depth is not None and r.depth < r.drafted for r in result.rounds)  # real trees
    assert draft.off_chain >= 1


def test_trees_only_where_asked_and_where_the_forward_can_hold_them(twins):
    """Without trees, or under pinned shapes (not bitwise off the first chain yet), the loop asks
    for chains; the output is greedy's either way."""
    target, _ = twins
    prompt = list(range(30, 40)) + list(range(30, 36))
    greedy = greedy_decode(target, prompt, 24, frozenset()).tokens
    with pytest.raises(AssertionError, match="asked a tree draft for a chain"):
        speculative_decode(target, Branchy(greedy, len(prompt), target.vocab_size), prompt, 4, 24, frozenset())
    lookup = PromptLookupDraft(CPU)
    assert speculative_decode(target, lookup, prompt, 4, 24, frozenset(), width=5, trees=True).tokens == \
        greedy_decode(target, prompt, 24, frozenset(), width=5).tokens


def test_rows_of_a_batch_with_trees_equal_their_greedy_outputs(twins):
    target, _ = twins
    prompts = [list(range(3, 15)) * 2, [7, 8, 7, 8, 7], list(range(20, 45)), [5, 6, 7, 5, 6]]
    expected = [greedy_decode(target, p, 30, frozenset()).tokens for p in prompts]
    got = dict(decode_rows(target, PromptLookupDraft(CPU), prompts, 6, 30, frozenset(), batch=3, trees=True))
    assert [got[i].tokens for i in range(len(prompts))] == expected


# ---------------------------------------------------------------------------- sampling with trees
WARPED = Sampling(temperature=0.8, top_k=6)
PROMPT = [3, 5, 7, 3, 5, 9, 3, 5, 7, 3, 5]  # `3 5` was followed by 7 and by 9: a two-branch trie


def draws(target, tree: bool, n: int, seed: int) -> Counter:
    g = torch.Generator().manual_seed(seed)
    if tree:
        return Counter(tuple(speculative_sample(target, PromptLookupDraft(CPU), PROMPT, 4, 2, frozenset(), WARPED, g,
                                                trees=True).tokens) for _ in range(n))
    return Counter(tuple(sample_decode(target, PROMPT, 2, frozenset(), WARPED, g).tokens) for _ in range(n))


def test_sampling_with_trees_matches_plain_sampling(twins, monkeypatch):
    """Two tokens drawn with a trie draft (siblings at the root) against plain sampling: the same
    distribution (chi-square); a walk that follows the target's argmax instead of its draws fails."""
    target, _ = twins
    plain = draws(target, False, 1500, 1)
    assert homogeneity(draws(target, True, 1500, 2), plain).p_value >= 1e-3
    monkeypatch.setattr("specdec_cli.loop.sampling.sample", lambda probs, g: probs.argmax(-1))
    assert homogeneity(draws(target, True, 300, 2), plain).p_value < 1e-6


# ---------------------------------------------------------------------------- the card field and the CLI
def lookup_card(write_card, **decoding):
    from .test_pinned import LLAMA

    return write_card({"description": "t", "target": f"random:{LLAMA}", "device": "cpu", "dtype": "float32",
                       "draft": {"kind": "prompt-lookup", "schedule": "fixed"},
                       "decoding": {"k": 4, "max_tokens": 24, "tree": True, **decoding}})


def test_generate_with_trees_reports_them_and_equals_greedy(run, write_card, one_thread):
    prompt = "ab cd ab ce ab cd ab cf ab"
    r = run("generate", "-c", lookup_card(write_card), "--json", prompt)
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert (out["tree"], out["identical"]) == (True, True)
    assert "· tree" in r.stderr
    assert all("depth" in x for x in out["spec"]["rounds"] if x["drafted"]) and out["spec"]["rounds"]
    chain = parse_json_lines(run("generate", "-c", lookup_card(write_card), "--chain", "--json", prompt).stdout)[0]
    assert (chain["tree"], chain["greedy"]["tokens"]) == (False, out["greedy"]["tokens"])
    assert not any("depth" in x for x in chain["spec"]["rounds"])
    pinned = run("generate", "-c", lookup_card(write_card), "--shapes", "pinned", "--json", prompt)
    assert pinned.exit_code == 0, pinned.stderr
    assert parse_json_lines(pinned.stdout)[0]["tree"] is True  # sdpa on a CPU: detoured, bitwise
    toy = run("generate", "-c", "toy", "--tree", "--json", "ba be")
    assert toy.exit_code == 0 and "draft proposes chains" in toy.stderr, toy.stderr
    assert parse_json_lines(toy.stdout)[0]["tree"] is False


def test_a_bad_tree_field_is_one_error_line(run, write_card):
    r = run("generate", "-c", lookup_card(write_card, tree="sometimes"), "ab")
    assert r.exit_code == 2
    assert r.stderr.count("Error:") == 1 and "decoding.tree" in r.stderr and "sometimes" in r.stderr


# ---------------------------------------------------------------------------- pinned shapes: bitwise
@pytest.fixture(scope="module")
def bf16_twins():
    from .checkpoints import TWINS, twins as make_twins

    torch.set_num_threads(1)
    return {name: HFLM(make_twins(*TWINS[name])[0].to(torch.bfloat16)) for name in ("llama", "qwen2")}


def logit_bits(result) -> list:
    return [row.view(torch.int32).tolist() for row in result.logits]


@pytest.mark.parametrize("shape", ["llama", "qwen2"])
def test_pinned_trees_are_bitwise_plain_greedy_with_off_chain_paths(bf16_twins, shape, monkeypatch):
    """bfloat16, pinned W = 5: every round keeps a path off the first chain, and the tokens and
    every emitted token's logits are bitwise plain pinned greedy's (the detours: each off-chain
    slot attends over a chain layout). Without the detours the logits part."""
    target = bf16_twins[shape]
    prompts = [list(range(3, 40)), list(range(50, 63)), [7, 8, 9] * 9]
    for prompt in prompts:
        greedy = greedy_decode(target, prompt, 32, frozenset(), width=5, trace=True)
        draft = Branchy(greedy.tokens, len(prompt), target.vocab_size)
        spec = speculative_decode(target, draft, prompt, 4, 32, frozenset(), width=5, trace=True, trees=True)
        assert spec.tokens == greedy.tokens
        assert sum(r.accepted == 2 for r in spec.rounds) >= 8
        assert logit_bits(spec) == logit_bits(greedy)


def test_pinned_tree_rows_of_a_batch_are_bitwise_their_greedy_outputs(bf16_twins):
    target = bf16_twins["llama"]
    prompts = [list(range(3, 40)), [7, 8, 7, 8, 7, 8, 9, 7, 8], list(range(20, 45)), [5, 6, 7, 5, 6, 8, 5, 6]]
    expected = {i: greedy_decode(target, p, 24, frozenset(), width=7, trace=True) for i, p in enumerate(prompts)}
    got = dict(decode_rows(target, PromptLookupDraft(CPU), prompts, 6, 24, frozenset(), batch=3, width=7,
                           trace=True, trees=True))
    for i in range(len(prompts)):
        assert got[i].tokens == expected[i].tokens
        assert logit_bits(got[i]) == logit_bits(expected[i])


@pytest.fixture(scope="module")
def smollm2_bf16(tmp_path_factory, converted_store):
    from specdec_cli.cards.card import load_card, override
    from specdec_cli.pair.loading import load_pair
    from tests.conftest import own_cache

    with own_cache(tmp_path_factory, converted_store):
        return load_pair(override(load_card("smollm2"), dtype="bfloat16", shapes="pinned"))


def test_pinned_trees_on_smollm2_need_their_detours(smollm2_bf16, one_thread, monkeypatch):
    """SmolLM2 in bfloat16, pinned W = 5, off-chain paths kept every round: bitwise plain greedy
    (tokens and logits). With each off-chain slot attending where its ancestors sit instead
    (no detours), the logits part from greedy's: the tiny models above cannot show it, this one does."""
    pair = smollm2_bf16
    target = pair.target

    def check(text: str) -> bool:
        prompt = pair.encode(text, 32)
        greedy = greedy_decode(target, prompt, 32, frozenset(), width=5, trace=True)
        spec = speculative_decode(target, Branchy(greedy.tokens, len(prompt), target.vocab_size), prompt, 4, 32,
                                  frozenset(), width=5, trace=True, trees=True)
        assert sum(r.accepted == 2 for r in spec.rounds) >= 8
        return spec.tokens == greedy.tokens and logit_bits(spec) == logit_bits(greedy)

    texts = ["Explain what a hash table is.", "Write a haiku about autumn rain."]
    assert all(check(t) for t in texts)
    monkeypatch.setattr("specdec_cli.engine.attention.Detours.apply", lambda self, out, *args: out)
    assert not all(check(t) for t in texts)


def test_the_shipped_head_drafts_tree_rows_of_a_batch_bitwise_their_greedy_outputs(tmp_path_factory, converted_store,
                                                                                     one_thread):
    """smollm2-distilled (its trained head and its lookup) in bfloat16, pinned W = 5, trees, three
    prompts two rows at a time, each row drafting from its own hidden states: every row is its
    plain pinned greedy output bitwise, tokens and logits, and the head's trees are accepted."""
    from specdec_cli.cards.card import load_card, override
    from specdec_cli.pair.loading import load_pair
    from tests.conftest import own_cache

    with own_cache(tmp_path_factory, converted_store):
        pair = load_pair(override(load_card("smollm2-distilled"), dtype="bfloat16", shapes="pinned", schedule="fixed"))
    texts = ["Explain what a hash table is.", "Write a haiku about autumn rain.", "How do I reverse a list in Python?"]
    prompts = [pair.encode(t, 24) for t in texts]
    expected = [greedy_decode(pair.target, p, 24, frozenset(), width=5, trace=True) for p in prompts]
    got = dict(decode_rows(pair.target, pair.draft, prompts, 4, 24, frozenset(), batch=2, width=5, trace=True,
                           trees=True))
    for i, greedy in enumerate(expected):
        assert got[i].tokens == greedy.tokens and logit_bits(got[i]) == logit_bits(greedy), texts[i]
    assert sum(got[i].stats.accepted for i in got) >= 20


def test_bench_sets_the_tree_beside_the_chain(run, write_card, one_thread):
    """A card that asks for trees gets its draft benched both ways: a chain row and a tree row per
    category, each identical to greedy, with tokens per round for each."""
    r = run("bench", "-c", lookup_card(write_card), "-r", "1", "--limit", "1", "-n", "12", "--json")
    assert r.exit_code == 0, r.stderr
    rows = [row for row in parse_json_lines(r.stdout) if row.get("row") == "bench" and row["scope"] == "all"]
    assert sorted((row["draft"].endswith(" tree"), row["tree"]) for row in rows) == [(False, False), (True, True)]
    assert all(row["identical"] and row["tokens_per_round"] >= 1 for row in rows)


def test_plan_replays_the_tree_beside_the_chain_as_a_real_run_decodes_it(run, write_card, one_thread, tmp_path):
    """plan with trees: a tree row beside each chain row of a draft that proposes trees, whose
    replayed rounds are the ones a real `generate --tree` makes (the replay answers a tree's
    slots by depth); without trees, chain rows only."""
    prompt = "ab cd ab ce ab cd ab cf ab"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "p", "category": "c", "prompt": prompt}) + "\n")
    card = lookup_card(write_card)
    r = run("plan", "-c", card, "-k", "4", "--prompts-file", prompts, "-n", "24", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {(row["tree"], row["schedule"]): row for row in parse_json_lines(r.stdout) if row["k"] == 4}
    assert {tree for tree, _ in rows} == {False, True}
    for tree in (False, True):
        real = run("generate", "-c", card, "--tree" if tree else "--chain", "-m", "spec", "-n", "24", "--json", prompt)
        assert real.exit_code == 0, real.stderr
        metrics = parse_json_lines(real.stdout)[0]["spec"]["metrics"]
        assert (rows[tree, "fixed"]["verify_rounds"], rows[tree, "fixed"]["tokens"]) == \
            (metrics["verify_rounds"], metrics["tokens"])
    assert rows[True, "fixed"]["verify_rounds"] < rows[False, "fixed"]["verify_rounds"]  # the trie's branches paid
    chains = parse_json_lines(run("plan", "-c", card, "--chain", "-k", "4", "--prompts-file", prompts, "-n", "24",
                                  "--json").stdout)
    assert chains and not any(row["tree"] for row in chains)


def test_the_replay_answers_a_trees_slots_by_depth_features_too():
    """plan's ReplayTarget: slot s of a tree fed after `length` positions is answered as position
    length + depth(s) of the continuation (logits and features); slots past its end (never read)
    get the last features instead of an error."""
    from specdec_cli.eval.plan import ReplayCache, ReplayTarget

    class Real:  # the real target's teacher-forced features: position j -> [j, j]
        device, vocab_size, max_positions = torch.device("cpu"), 16, None

        def new_cache(self):
            return None

        def forward(self, ids, cache, keep=0, features=False):
            return None, torch.arange(ids.shape[1], dtype=torch.float)[:, None].expand(-1, 2)

    replay, cache = ReplayTarget(Real(), [1, 2, 3, 4, 5, 6, 7, 8]), ReplayCache()
    cache.length = 2
    logits, feats = replay.forward(torch.zeros(1, 4, dtype=torch.long), cache, features=ONLY_FINAL, tree=(0, 0, 1))
    assert logits.argmax(-1).tolist() == [4, 5, 5, 6] and feats[:, 0].tolist() == [2, 3, 3, 4]  # depths 0 1 1 2
    assert cache.length == 6
    cache.length = 6
    logits, feats = replay.forward(torch.zeros(1, 4, dtype=torch.long), cache, features=ONLY_FINAL, tree=(0, 1, 1))
    assert logits.argmax(-1).tolist()[:2] == [8, 0] and feats[:, 0].tolist() == [6, 7, 7, 7]  # past the end: the last
