"""Draft kinds are a registry: a kind declared here, in the test, and registered, runs through
`generate`, `verify-exactness`, `plan` and `export` on a toy card like a built-in one, without
any other module changing. And what a built-in kind's class declares it can do is what it does.
"""

from __future__ import annotations

import json

import pytest
import torch

from specdec_cli.drafts import registry as kinds
from specdec_cli.cards.card import DraftSpec
from specdec_cli.checks import integer
from specdec_cli.drafts import Draft
from specdec_cli.drafts.registry import Field, Kind

from .conftest import parse_json_lines
from .test_errors import assert_one_error


class RepeatDraft(Draft):
    """Proposes the last token again, `copies` times at most: right whenever the target repeats."""

    def __init__(self, device, copies: int, name: str):
        self.device, self.copies, self.name = device, copies, name
        self.forwards = 0

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return torch.tensor(tokens[-1:] * min(k, self.copies), dtype=torch.long, device=self.device)


class Repeat(Kind):
    name = "repeat"
    draft = RepeatDraft
    fields = (Field("copies", integer(1, 64), required=True),)
    engines = ("vllm",)
    why_not = "a test draft that repeats the last token"

    def detail(self, spec) -> str:
        return f"copies={spec.copies}"

    def build(self, spec, pair, name: str) -> RepeatDraft:
        return RepeatDraft(pair.target.device, spec.copies, name)

    def export(self, engine, spec, card, model, notes) -> dict:
        return {"method": "repeat", "num_speculative_tokens": card.k, "copies": spec.copies}


@pytest.fixture
def repeat():
    kinds.register(Repeat())
    yield
    kinds.unregister("repeat")


def card(write_card, target="toy", **draft):
    return write_card({"description": "the toy card with a draft kind declared in a test", "target": target,
                       "draft": {"kind": "repeat", "copies": 3, **draft},
                       "decoding": {"k": 4, "max_tokens": 32}, "device": "cpu"})


def test_a_registered_kind_generates_exactly(run, write_card, repeat):
    """A fixed schedule: the cost schedule's d follows the toy's measured timings (on a busy
    machine it drafted 2 of 3 in one run of five)."""
    r = run("generate", "-c", card(write_card, schedule="fixed"), "--json", "ba ba ba")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["draft"] == "repeat(copies=3)" and out["identical"] is True
    # the kind's own draft ran: it drafted, and never more than its copies (k is 4)
    assert max(round_["drafted"] for round_ in out["spec"]["rounds"]) == 3


def test_a_registered_kind_passes_verify_exactness_and_plan(run, write_card, repeat):
    path = card(write_card, schedule="fixed")
    r = run("verify-exactness", "-c", path, "-k", "1,4", "--json", "ba be", "bi bo bu")
    assert r.exit_code == 0, r.output
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 4 and all(c["identical"] and c["draft"] == "repeat(copies=3)" for c in checks)
    # every run drafted (spec == greedy is not trivial), and the toy's one repeat ("bi bo bu"
    # continues ... 20, 20 ...) was proposed and kept at both k
    assert all(c["drafted"] > 0 for c in checks) and [c["accepted"] > 0 for c in checks] == [False, False, True, True]
    r = run("plan", "-c", path, "-d", "repeat:copies=2", "-k", "2", "--limit", "1", "--json")
    assert r.exit_code == 0, r.output
    rows = parse_json_lines(r.stdout)
    assert {(row["draft"], row["schedule"]) for row in rows if row["k"]} == {
        ("repeat(copies=2)", s) for s in ("cost", "heuristic", "fixed")}
    assert all(row["drafted"] > 0 for row in rows if row["k"] and row["schedule"] == "fixed")


def test_a_registered_kind_exports_where_it_says_and_refuses_elsewhere(run, write_card, repeat):
    served = card(write_card, target="HuggingFaceTB/SmolLM2-135M-Instruct")
    r = run("export", served, "--engine", "vllm", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["speculative"] == {"method": "repeat", "num_speculative_tokens": 4, "copies": 3}
    assert_one_error(run("export", served, "--engine", "sglang"),
                     f"{served}: draft.kind: sglang has no draft kind 'repeat' (a test draft that repeats the "
                     f"last token); it runs draft kinds model, prompt-lookup")
    toy = card(write_card)  # vLLM runs the kind, but not the toy target
    assert_one_error(run("export", toy, "--engine", "vllm"),
                     f"{toy}: target: vllm cannot load 'toy': it is specdec's built-in toy model")


def test_a_registered_kind_s_fields_are_checked_like_any_other(run, write_card, repeat):
    missing = write_card({"description": "t", "target": "toy", "draft": {"kind": "repeat"}})
    assert_one_error(run("generate", "-c", missing, "ba"),
                     f"{missing}: draft.copies: missing (required for draft kind 'repeat')")
    bad = card(write_card, copies=0)
    assert_one_error(run("generate", "-c", bad, "ba"), f"{bad}: draft.copies: must be an integer in 1..64, got 0")
    other = card(write_card, agree=0.5)
    assert_one_error(run("generate", "-c", other, "ba"), f"{other}: draft.agree: not used by draft kind 'repeat', got 0.5")
    assert DraftSpec("repeat", copies=2).label() == "repeat(copies=2)+cost"
    with pytest.raises(TypeError, match="has no field 'agree'"):
        DraftSpec("repeat", copies=2, agree=0.5)


def test_an_unregistered_kind_is_unknown_again(run, write_card):
    kinds.register(Repeat())
    kinds.unregister("repeat")
    path = write_card({"description": "t", "target": "toy", "draft": {"kind": "repeat"}})
    assert_one_error(run("generate", "-c", path, "ba"),
                     f"{path}: draft.kind: must be one of model, prompt-lookup, early-exit, toy, synthetic, "
                     f"features, got 'repeat'")
    with pytest.raises(ValueError, match="already registered"):
        kinds.register(kinds.get("toy"))


@pytest.mark.parametrize("kind", kinds.kinds(), ids=lambda k: k.name)
def test_a_built_in_kind_declares_what_its_draft_does(kind):
    """Capabilities are declared, never probed for: a class says it samples exactly when it
    draws from its own distribution, it runs a model exactly when it measures a step, and so on."""
    cls = kind.draft
    overrides = lambda method: getattr(cls, method) is not getattr(Draft, method)  # noqa: E731
    assert cls.samples == overrides("propose_sampled")
    assert cls.runs_model == overrides("step_seconds")
    assert cls.fills == overrides("filler")
    assert not cls.free or overrides("lookup")  # a free draft can be peeked at
    assert not (cls.free and cls.runs_model)
    assert kind.target in (None, "toy", "transformers")
    assert all(isinstance(f.default, (type(None), int, float, str)) for f in kind.fields)
