"""The option rules, called directly: each command's request checks its options and how they
combine, with the same messages the CLI prints (tests/test_errors.py drives them end to end)."""

from __future__ import annotations

import json

import pytest

from specdec_cli.cards.card import load_card
from specdec_cli.errors import SpecdecError
from specdec_cli.cards.prompts import SUITE, first_per_category
from specdec_cli.cli.requests import (BenchRequest, DistillRequest, GenerateRequest, PlanRequest, VerifyRequest,
                                  check_output_file, parse_ks)


def raises(message: str):
    return pytest.raises(SpecdecError, match=message)


# ---------------------------------------------------------------------------- shared values
def test_parse_ks_checks_each_item_like_a_card_field():
    assert parse_ks("1,2,8") == [1, 2, 8]
    with raises(r"^command line: -k: expected integers separated by commas, got '1,x'$"):
        parse_ks("1,x")
    with raises(r"^command line: --k-sweep: must be an integer in 1\.\.\d+, got 0$"):
        parse_ks("0", "--k-sweep")


def test_output_file_fails_before_the_run(tmp_path):
    check_output_file("--csv", str(tmp_path / "a.csv"))
    with raises("is a directory; give a file name"):
        check_output_file("--csv", str(tmp_path))
    with raises("folder .* does not exist"):
        check_output_file("--csv", str(tmp_path / "missing" / "a.csv"))
    with raises(r"file name must end in \.png, \.svg, \.pdf, got"):
        check_output_file("--plot", str(tmp_path / "a.gif"), (".png", ".svg", ".pdf"))


# ---------------------------------------------------------------------------- generate
@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "fast"}, "command line: --mode: must be spec, greedy or both, got 'fast'"),
    ({"batch": 0}, "command line: --batch: must be an integer in 1..256, got 0"),
    ({"batch": 4}, "command line: --batch: decodes the prompts of --prompts-file together; give --prompts-file"),
])
def test_generate_options(kwargs, message):
    with pytest.raises(SpecdecError) as e:
        GenerateRequest(**kwargs)
    assert str(e.value) == message


def test_generate_prompt_from_argument_stdin_or_both():
    assert GenerateRequest(prompt="hi").read(None) == ("hi", None)
    assert GenerateRequest().read("piped\n") == ("piped\n", None)
    assert GenerateRequest(prompt="-").read("piped") == ("piped", None)
    assert GenerateRequest(prompt="question").read("context\n\n") == ("context\nquestion", None)  # stdin first
    with raises("^no prompt: give PROMPT, pipe text on stdin, or use --prompts-file$"):
        GenerateRequest().read(None)
    with raises("^prompt is empty$"):
        GenerateRequest(prompt="  ").read(None)


def test_generate_prompts_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "ba be"}) + "\n")
    prompt, batch = GenerateRequest(prompts_file=str(path), batch=2).read(None)
    assert prompt is None and [(p.id, p.text) for p in batch] == [("a", "ba be")]
    assert GenerateRequest(prompts_file="-").read('{"prompt": "x"}')[1][0].text == "x"
    with raises("^give either PROMPT or --prompts-file, not both$"):
        GenerateRequest(prompt="hi", prompts_file=str(path)).read(None)


# ---------------------------------------------------------------------------- verify-exactness
@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 5}, "command line: --samples: must be an integer in 10..10000000, got 5"),
    ({"positions": 0}, "command line: --positions: must be an integer in 1..64, got 0"),
    ({"alpha": 1.0}, "command line: --alpha: must be a number in (0, 1), got 1.0"),
    ({"drafts": ["toy:agree"]}, "--draft 'toy:agree': expected key=value after ':', got 'agree'"),
    ({"prompts": ["a"], "prompts_file": "p.txt"}, "give either PROMPTS or --prompts-file, not both"),
])
def test_verify_options(kwargs, message):
    with pytest.raises(SpecdecError) as e:
        VerifyRequest(**kwargs)
    assert str(e.value) == message


def test_verify_parses_ks_drafts_and_prompts():
    r = VerifyRequest(prompts=["ba", "be"], ks="1,4", drafts=["toy:agree=0.5"])
    assert r.k_list == [1, 4] and r.specs[0].kind == "toy" and r.specs[0].agree == 0.5
    assert [(p.id, p.text) for p in r.items()] == [("arg-1", "ba"), ("arg-2", "be")]
    assert VerifyRequest().items() is None and VerifyRequest().k_list is None  # defaults depend on the card


# ---------------------------------------------------------------------------- plan
def test_plan_options():
    with raises(r"^command line: --limit: must be an integer in 1\.\.1000000, got 0$"):
        PlanRequest(limit=0)
    r = PlanRequest(ks="2,4", limit=2)
    assert r.k_list == [2, 4] and r.specs == [] and r.items() == first_per_category(SUITE, 2)


# ---------------------------------------------------------------------------- bench
@pytest.mark.parametrize("kwargs, message", [
    ({"agree_sweep": "0.5,2"}, "command line: --agree-sweep: must be a number in [0, 1], got 2.0"),
    ({"agree_sweep": "0.5,0.5"}, "command line: --agree-sweep: 0.5 given more than once"),
    ({"k_sweep": "2,4,2"}, "command line: --k-sweep: 2 given more than once"),
    ({"k": 3, "k_sweep": "2,4"}, "command line: give -k or --k-sweep, not both"),
    ({"repeats": 0}, "command line: --repeats: must be an integer in 1..1000, got 0"),
    ({"batch": 2, "agree_sweep": "0.5"}, "command line: --batch: cannot be combined with --agree-sweep (batched runs "
                                         "time the card's draft against the target alone)"),
    ({"batch": 2, "vs_transformers": True}, "command line: --batch: cannot be combined with --vs-transformers (batched "
                                            "runs time the card's draft against the target alone)"),
    ({"batch": 2, "draft_cost": 1.0}, "command line: --batch: cannot be combined with --draft-cost (batched runs time "
                                      "the card's draft against the target alone)"),
    ({"limit": 0}, "command line: --limit: must be an integer in 1..1000000, got 0"),
    ({"seed": -1}, "command line: --seed: must be an integer in 0..9223372036854775807, got -1"),
    ({"draft_cost": 1.0}, "command line: --draft-cost: simulates the synthetic draft's cost; needs --agree-sweep"),
    ({"draft_cost": 101.0, "agree_sweep": "1"},
     "command line: --draft-cost: must be a number of target steps in [0, 100], got 101.0"),
    ({"plot": "sweep.png"}, "command line: --plot: plots a sweep; add --agree-sweep and/or --k-sweep"),
])
def test_bench_options(kwargs, message):
    with pytest.raises(SpecdecError) as e:
        BenchRequest(**kwargs)
    assert str(e.value) == message


def test_bench_plot_needs_matplotlib(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with raises(r"^command line: --plot: needs matplotlib \(pip install 'specdec\[plot\]'\)$"):
        BenchRequest(k_sweep="2,4", plot=str(tmp_path / "sweep.png"))


def test_bench_options_that_depend_on_the_card():
    toy = load_card("toy")
    assert BenchRequest().check_card(toy) is False
    assert BenchRequest(temperature=0.8, seed=3).check_card(toy) is True
    assert BenchRequest(agree_sweep="0.5", seed=3).sampling["seed"] is None  # --seed seeds the synthetic draft
    with raises("^command line: --agree-sweep: the synthetic draft's agreement is defined for greedy decoding"):
        BenchRequest(agree_sweep="0.5", temperature=0.8).check_card(toy)
    with raises("^command line: --vs-transformers: compares greedy outputs token for token"):
        BenchRequest(vs_transformers=True, temperature=0.8).check_card(toy)
    with raises(r"^command line: --seed: seeds the synthetic draft \(--agree-sweep\) or sampling"):
        BenchRequest(seed=3).check_card(toy)


def test_bench_prompts():
    r = BenchRequest(limit=1, agree_sweep="0.3,1")
    assert r.agrees == [0.3, 1.0] and r.sweep and r.items() == first_per_category(SUITE, 1)
    assert BenchRequest().items() == SUITE and not BenchRequest().sweep


# ---------------------------------------------------------------------------- distill
@pytest.mark.parametrize("kwargs, message", [
    ({"minutes": 0.0}, "command line: --minutes: must be a number > 0, got 0.0"),
    ({"minutes": float("nan")}, "command line: --minutes: must be a number > 0, got nan"),
    ({"seed": -1}, "command line: --seed: must be an integer in 0..9223372036854775807, got -1"),
    ({"steps": 0}, "command line: --steps: must be an integer in 1..1000000000, got 0"),
    ({"prompts": 0}, "command line: --prompts: must be an integer in 1..1000000000, got 0"),
    ({"self_prompts": -3}, "command line: --self-prompts: must be an integer in 0..1000000, got -3"),
])
def test_distill_options(kwargs, message):
    with pytest.raises(SpecdecError) as e:
        DistillRequest(card="toy", **kwargs)
    assert str(e.value) == message


def test_distill_replay_command_and_defaults():
    r = DistillRequest(card="smollm2", minutes=1.5, seed=2, steps=40, prompts=100)
    assert r.command_line() == "specdec distill -c smollm2 --minutes 1.5 --seed 2 --steps 40 --prompts 100"
    assert r.out_path("smollm2").name == "smollm2-features"
    items, source = r.items()
    assert items and source.startswith("specdec_cli.training.trainprompts (") and "wrote" not in source
    own = DistillRequest(card="smollm2", steps=40, self_prompts=512)
    assert own.command_line() == "specdec distill -c smollm2 --minutes 30 --seed 0 --steps 40 --self-prompts 512"
    assert own.items()[1].endswith(" templated prompts) and 512 the target wrote (--self-prompts)")
