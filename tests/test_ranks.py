"""Acceptance by depth and rank in token trees (loop/ranks.py) and the cost schedule's tree size
(schedule.best_tree): what a tree of d nodes is worth, learned from rounds, and the d it buys."""

from __future__ import annotations

import pytest

from specdec_cli.engine import costs
from specdec_cli.loop.ranks import Ranks
from specdec_cli.loop.schedule import Cost, Scheduled, best_length, best_tree, expected_tokens

CPU = [1.00, 1.05, 1.10, 1.40, 1.45, 1.50, 1.55, 1.60, 1.65, 1.70]  # a verify's cost in steps by width


class Only(Ranks):
    """No younger sibling is ever the target's token: a tree is worth its first chain."""

    SIBLING = 0.0


def test_without_siblings_a_tree_is_worth_the_chain_of_its_size():
    for prior in (0.3, 0.6, 0.9):
        assert [Only(prior).expected(d) for d in range(6)] == pytest.approx([expected_tokens([prior] * d) for d in range(6)])


def test_the_best_tree_takes_the_likeliest_nodes_after_their_parents_and_elder_siblings():
    class Even(Ranks):
        SIBLING = 1.0  # every rank at every depth: 0.5

    ranks = Even(0.5)
    # depth 1 rank 0: 0.5; then its first child 0.25 and the second sibling 0.5 * 0.5 = 0.25;
    # then 0.125 for each of: the child's child, the child's sibling, the third sibling, the
    # second sibling's child
    assert [ranks.expected(d) for d in range(8)] == pytest.approx([1, 1.5, 1.75, 2.0, 2.125, 2.25, 2.375, 2.5])
    assert ranks.expected(3) == 2.0 > expected_tokens([0.5] * 3) == 1.875  # the chain's third token is worth 0.125


def test_rounds_teach_each_rank_at_each_depth():
    ranks = Ranks(0.5)
    parents, proposed = (0, 0, 1), [10, 11, 12]  # two children of the root; slot 3 hangs on slot 1
    for _ in range(40):
        ranks.observe(parents, proposed, [11])  # the second child was the target's token
    assert ranks.rate(1, 0) < 0.1 and ranks.rate(1, 1) > 0.9
    assert ranks.rate(2, 0) == pytest.approx(ranks.rate(1, 0))  # never reached: borrows from depth 1
    for _ in range(100):
        ranks.observe(parents, proposed, [10])  # the first child, then not slot 3's token
    assert ranks.rate(1, 0) > 0.9 and ranks.rate(2, 0) < 0.1
    assert ranks.reached[(1, 1)] < 2  # not tried once the first child was kept: its count only decays


def test_the_cost_schedule_buys_a_wider_tree_where_siblings_are_often_right():
    """The same rounds (the draft's first choice right half the time, its second choice the other
    half, two tokens deep) teach the chain estimate to stop at its first guess half the time, and
    the tree estimate that the second guess is right whenever the first is not: at a verify cost
    that rises with the width, the tree's best d is larger than the chain's."""
    profile = costs.fixed(CPU, 0.0, "d")
    schedule = Cost(lambda widths: profile, "d", prior=lambda key: 0.5)
    schedule.begin()
    parents, proposed = (0, 0, 1, 2, 3, 4), [10, 11, 12, 13, 14, 15]  # two chains of 3 from the root
    for i in range(60):
        kept = [10, 12] if i % 2 else [11, 13]  # then the third token is not the target's
        schedule.observe(0, drafted=3, accepted=2, tree=(parents, proposed, kept))
        schedule.observe(0, drafted=3, accepted=2 if i % 2 else 0)  # the chain 10, 12, 14 on the same rounds
    chain = schedule.length(0, 8, 100)
    tree = schedule.length(0, 8, 100, tree=True)
    assert schedule.ranks(0).rate(1, 1) > 0.9 and tree > chain
    c, v = 0.0, (lambda n: CPU[n - 1])
    assert best_tree(schedule.ranks(0), 8, c, v)[0] == tree and best_length(schedule.acceptance(0).alphas(8), 8, c, v)[0] == chain


def test_a_scheduled_tree_draft_teaches_its_schedule_the_ranks(monkeypatch):
    """Scheduled passes a tree round's shape, tokens and the kept path to the schedule."""
    import torch

    class TwoGuesses:
        name, forwards, free, trees, reads_features, needs_reference, fills = "two", 0, True, True, (), False, False

        def begin(self, prompt, features=None):
            pass

        def context_key(self, tokens, k):
            return 1

        def propose_tree(self, tokens, d):
            return torch.tensor([7, 8][:d]), (0, 0)[:d]

        def update(self, tokens, accepted, new=None, features=None):
            pass

    profile = costs.fixed(CPU, 0.0, "two")
    schedule = Cost(lambda widths: profile, "two", prior=lambda key: 0.5)
    draft = Scheduled(TwoGuesses(), schedule)
    draft.begin([1, 2, 3])
    for _ in range(30):
        tokens = [1, 2, 3]
        proposal, parents = draft.propose_tree(tokens, 2)
        assert parents == (0, 0)
        draft.update(tokens + [8, 5], 1)  # the second guess was the target's token, then its own
    assert schedule.ranks(1).rate(1, 1) > 0.9 and schedule.ranks(1).rate(1, 0) < 0.1
