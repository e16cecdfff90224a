"""The plain decode at its cheapest width (issue 34, item 1): where the cost profile measured a
wider forward cheaper than a narrower one, a free-shape forward runs at the cheapest width at
or above what it needs, padded; the greedy step included. The tokens stay the target's greedy
tokens, the schedule prices a round at the width it runs at, and the JSON names the width."""

from __future__ import annotations

import pytest

from specdec_cli.cards.card import load_card
from specdec_cli.engine import costs
from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import PromptLookupDraft
from specdec_cli.loop.schedule import Cost
from specdec_cli.pair.loading import load_pair
from tests.conftest import parse_json_lines, transformers_greedy
from tests.test_kernels import tiny_card

NO_EOS = frozenset()
AMD = [1.00, 0.80, 0.97, 1.03, 0.98]  # v(1..5) measured on a 2-core AMD EPYC (issue 34): 2 wide beats 1 wide


def test_cheapest_widths_pads_only_where_a_wider_forward_measured_cheaper():
    assert costs.cheapest_widths(costs.fixed(AMD)) == {"1": 2, "4": 5}
    assert costs.cheapest_widths(costs.fixed([1.0, 1.03, 1.2, 1.3, 1.5])) == {}  # cost grows with width: none
    assert costs.cheapest_widths(costs.fixed([1.0, 0.98, 1.2])) == {}  # within 3 %: noise does not decide
    profile = costs.fixed(AMD)
    profile.padded = costs.cheapest_widths(profile)
    assert [profile.width(n) for n in range(1, 6)] == [2, 2, 3, 5, 5]
    assert profile.run_v(1) == pytest.approx(0.8) and profile.v(1) == 1.0 and profile.run_v(4) == pytest.approx(0.98)


def widths_fed(pair) -> list[int]:
    """Every decode forward's width from now on (a hook on the embedding, which sees every id)."""
    seen = []
    hook = pair.target.model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].shape[-1]))
    return seen, hook


def test_a_padded_plain_step_gives_the_targets_own_greedy_tokens(write_card):
    pair = load_pair(load_card(str(tiny_card(write_card))))
    prompt = [5, 9, 5, 9, 17, 5, 23]
    plain = greedy_decode(pair.target, prompt, 16, NO_EOS)
    pair.target.pad({1: 2, 2: 3})
    seen, hook = widths_fed(pair)
    padded = greedy_decode(pair.target, prompt, 16, NO_EOS)
    hook.remove()
    assert padded.tokens == plain.tokens == transformers_greedy(pair.target, prompt, 16)
    assert seen[0] == len(prompt) - 1 and seen[1:] == [2] * 16  # the prefill, then every step 2 wide
    spec = speculative_decode(pair.target, PromptLookupDraft(pair.device), prompt, 1, 16, NO_EOS)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0  # verifies of 2 run 3 wide: still exact
    assert pair.policy.as_dict()["padded"] == {"1": 2, "2": 3}


def test_the_profile_pads_the_target_and_the_json_names_the_greedy_width(run, write_card, monkeypatch):
    """A measured profile where 2 wide is cheaper: the target's plain step runs 2 wide and
    generate --json says so (greedy_width beside greedy_form); speculative still equals greedy."""
    def measured(target, widths):
        return [64, 512], [AMD[:widths] + [1.0] * (widths - len(AMD))] * 2, ([], []), [], []

    monkeypatch.setattr(costs, "measure_target", measured)
    r = run("generate", "-c", tiny_card(write_card), "-m", "both", "--json", "ab ab ab ab")
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["greedy_width"] == 2 and out["identical"]
    assert out["forward_policy"]["padded"]["1"] == 2


def test_the_cost_schedule_prices_a_round_at_the_width_it_runs_at():
    """v(1) = 1.0, v(2) = 0.8. Unpadded, a plain step costs 1.0 and a round of one proposal 0.8,
    so even a draft that is never right proposes one (a free verify slot). Padded, the plain step
    runs 2 wide and costs 0.8 too: a draft with no chance of acceptance proposes nothing, one
    with a little still proposes."""
    def length(padded: bool, prior: float) -> int:
        profile = costs.fixed(AMD)
        profile.padded = costs.cheapest_widths(profile) if padded else {}
        cost = Cost(lambda widths: profile, "draft", prior=lambda key: prior)
        cost.begin()
        return cost.length(0, 4, 100)

    assert (length(False, 0.0), length(True, 0.0)) == (1, 0)
    assert length(True, 0.05) == 1 and length(True, 0.5) == length(False, 0.5) == 4
