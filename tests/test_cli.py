"""The CLI end to end on the toy backend: prompts in, JSON out, exit codes."""

from __future__ import annotations

import json

import pytest

from specdec_cli.cards.card import load_card
from specdec_cli.pair.loading import load_pair
from specdec_cli.cards.prompts import SUITE

from .conftest import parse_json_lines, toy_card_dict


def test_generate_json_has_the_contract_fields(run):
    r = run("generate", "--card", "toy", "--json", "ba be bi")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)  # stdout is exactly one JSON object
    assert obj["card"] == "toy" and obj["prompt"] == "ba be bi" and obj["prompt_tokens"] == 3 and obj["k"] == 4
    assert obj["identical"] is True and obj["spec"]["tokens"] == obj["greedy"]["tokens"]
    m = obj["spec"]["metrics"]
    assert m["tokens"] == len(obj["spec"]["tokens"]) == sum(r["emitted"] for r in obj["spec"]["rounds"])
    assert m["verify_rounds"] == len(obj["spec"]["rounds"]) and m["target_forwards"] == m["verify_rounds"] + 1
    assert m["draft_forwards"] > 0 and obj["greedy"]["metrics"]["draft_forwards"] == 0
    assert obj["speedup"] > 0 and "rounds" not in obj["greedy"]


def test_generate_matches_the_library(run):
    pair = load_pair(load_card("toy"))
    ids = pair.encode("ba be bi", 20)
    expected = pair.greedy(ids, 20).tokens
    obj = json.loads(run("generate", "-c", "toy", "--json", "-n", "20", "-k", "6", "ba be bi").stdout)
    assert obj["spec"]["tokens"] == expected and obj["k"] == 6
    assert all(r["drafted"] <= 6 for r in obj["spec"]["rounds"])


def test_prompt_from_argument_stdin_and_both(run):
    by_arg = json.loads(run("generate", "-c", "toy", "--json", "ba be").stdout)
    by_stdin = json.loads(run("generate", "-c", "toy", "--json", input="ba be\n").stdout)
    by_dash = json.loads(run("generate", "-c", "toy", "--json", "-", input="ba be").stdout)
    assert by_arg["spec"]["tokens"] == by_stdin["spec"]["tokens"] == by_dash["spec"]["tokens"]
    both = json.loads(run("generate", "-c", "toy", "--json", "bi", input="ba be").stdout)
    assert both["prompt"] == "ba be\nbi" and both["prompt_tokens"] == 3


def test_modes(run):
    spec = json.loads(run("generate", "-c", "toy", "--json", "--mode", "spec", "ba").stdout)
    greedy = json.loads(run("generate", "-c", "toy", "--json", "--mode", "greedy", "ba").stdout)
    assert "greedy" not in spec and "identical" not in spec and "spec" not in greedy
    assert spec["spec"]["tokens"] == greedy["greedy"]["tokens"]


def test_human_output_text_on_stdout_tables_on_stderr(run):
    r = run("generate", "-c", "toy", "--rounds", "-n", "12", "ba be")
    assert r.exit_code == 0
    pair = load_pair(load_card("toy"))
    text = pair.tokenizer.decode(pair.greedy(pair.encode("ba be", 12), 12).tokens)
    assert r.stdout.strip() == text
    for label in ("Rounds", "verify rounds", "tokens/round", "acceptance rate", "speedup", "identical"):
        assert label in r.stderr


def test_prompts_file_jsonl_and_stdin(run, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "ba be"}\n\n{"prompt": "di do du"}\n')
    rows = parse_json_lines(run("generate", "-c", "toy", "--prompts-file", f).stdout)
    assert [r["id"] for r in rows] == ["a", "line-3"] and all(r["identical"] for r in rows)
    same = parse_json_lines(run("generate", "-c", "toy", "--prompts-file", "-", input=f.read_text()).stdout)
    assert [r["spec"]["tokens"] for r in same] == [r["spec"]["tokens"] for r in rows]


def test_generate_exit_1_when_outputs_differ(run, monkeypatch):
    """A broken loop must be caught: make the speculative path emit a wrong token."""
    import specdec_cli.pair.loading as pair_mod

    real = pair_mod.Pair.spec

    def broken(self, *a, **kw):
        result = real(self, *a, **kw)
        result.tokens[-1] = (result.tokens[-1] + 1) % 64
        return result

    monkeypatch.setattr(pair_mod.Pair, "spec", broken)
    r = run("generate", "-c", "toy", "ba be")
    assert r.exit_code == 1 and "differs" in r.stderr
    r = run("generate", "-c", "toy", "--json", "ba be")
    assert r.exit_code == 1 and json.loads(r.stdout)["identical"] is False


def test_usage_errors_are_one_line_exit_2(run):
    cases = [
        (("generate", "-c", "toy", "-k", "0", "ba"), "--k: must be an integer in 1..64, got 0"),
        (("generate", "-c", "toy", "--mode", "fast", "ba"), "--mode: must be spec, greedy or both"),
        (("generate", "-c", "nope", "ba"), "unknown card 'nope'"),
        (("generate", "-c", "toy"), "no prompt"),
        (("generate", "-c", "toy", "   "), "prompt is empty"),
        (("generate", "-c", "toy", "--device", "cuda:7", "ba"), "device"),
        (("verify-exactness", "-c", "toy", "-k", "1,x", "ba"), "-k: expected integers"),
        (("verify-exactness", "-c", "toy", "-d", "warp", "ba"), "draft.kind: must be one of"),
    ]
    for args, message in cases:
        r = run(*args)
        assert r.exit_code == 2, (args, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr


def test_verify_exactness_on_toy(run):
    r = run("verify-exactness", "-c", "toy", "-k", "1,2,4,8", "-d", "toy:agree=0.3", "-d", "toy:agree=1.0",
            "--json", "ba be", "di do")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    assert len(rows) == 2 * 4 * 2 and all(row["identical"] and row["first_divergence"] is None for row in rows)
    assert {row["k"] for row in rows} == {1, 2, 4, 8}
    assert {row["draft"] for row in rows} == {"toy(agree=0.3)+cost", "toy(agree=1.0)+cost"}  # default schedule


def test_verify_exactness_builtin_suite_table(run):
    r = run("verify-exactness", "-c", "toy", "-k", "2", "-n", "16")
    assert r.exit_code == 0
    assert f"{len(SUITE)}/{len(SUITE)} identical" in r.stderr
    assert len(SUITE) >= 20 and len({p.category for p in SUITE}) == 7


def test_verify_exactness_reports_divergence(run, monkeypatch):
    import specdec_cli.pair.loading as pair_mod

    real = pair_mod.Pair.spec

    def broken(self, *a, **kw):
        result = real(self, *a, **kw)
        result.tokens[3] = (result.tokens[3] + 1) % 64
        return result

    monkeypatch.setattr(pair_mod.Pair, "spec", broken)
    r = run("verify-exactness", "-c", "toy", "-k", "2", "--json", "ba be")
    assert r.exit_code == 1
    (row,) = parse_json_lines(r.stdout)
    d = row["first_divergence"]
    assert d["index"] == 3 and d["spec_token"] == (d["greedy_token"] + 1) % 64
    assert d["margin"] > 0 and d["greedy_text"].strip()
    r = run("verify-exactness", "-c", "toy", "-k", "2", "ba be")
    assert r.exit_code == 1 and "margin" in r.stdout and "0/1 identical" in r.stderr


def test_cards_list_and_show(run):
    rows = json.loads(run("cards", "--json").stdout)
    names = {row["name"] for row in rows}
    assert {"smollm2", "smollm2-early-exit", "toy", "qwen2.5-7b", "llama-3.1-8b"} <= names
    assert all(set(row) == {"name", "description", "target", "draft"} for row in rows)
    shown = run("cards", "show", "toy")
    assert shown.exit_code == 0 and "kind: toy" in shown.stdout
    assert run("cards", "show", "nope").exit_code == 2


def test_card_from_path_and_toy_agreement(run, write_card):
    """A fixed schedule: under the cost schedule the toy's measured timings chose d (a busy
    machine once made it draft 2 of 3)."""
    card = toy_card_dict(agree=1.0, k=3, max_tokens=20)
    path = write_card({**card, "draft": {**card["draft"], "schedule": "fixed"}})
    obj = json.loads(run("generate", "--card", path, "--json", "--mode", "spec", "ba be bi").stdout)
    assert [r["emitted"] for r in obj["spec"]["rounds"]] == [4, 4, 4, 4, 4]


def test_draft_revision_is_the_drafts_own(write_card, monkeypatch):
    """A model draft loads at its own `draft.revision`; the card's `revision` is the target's."""
    from pathlib import Path

    import specdec_cli.pair.loading as pair_mod
    import specdec_cli.pair.targets as targets

    tiny = str(Path(__file__).resolve().parents[1] / "cards/configs/tiny-llama.json")
    real, seen = pair_mod.load, []

    def load(ref, device, dtype, trust_remote_code=False, revision=None, **kw):
        seen.append((ref.source, revision))
        return real(ref, device, dtype, trust_remote_code, revision, **kw)

    monkeypatch.setattr(pair_mod, "load", load)  # the draft's load
    monkeypatch.setattr(targets, "load", load)  # the target's
    card = write_card({"description": "t", "target": f"random:{tiny}", "revision": "target-rev", "device": "cpu",
                       "draft": {"kind": "model", "model": f"random:{tiny}", "revision": "draft-rev"}})
    pair = load_pair(load_card(str(card)))
    assert seen == [(tiny, "target-rev"), (tiny, "draft-rev")]
    assert f"model(random:{tiny}@draft-rev)" in pair.draft.name


def test_a_draft_that_reads_the_greedy_reference_gets_it_whatever_its_name():
    """`generate --mode spec` runs greedy first for a draft with `needs_reference` (the synthetic
    draft), also inside a wrapper: a property of the draft, not a prefix of its name."""
    from specdec_cli.eval.bench import SimulatedCost
    from specdec_cli.drafts import SyntheticDraft
    from specdec_cli.pair.generation import generate

    from .toys import reference

    pair = load_pair(load_card("toy"))
    synthetic = SyntheticDraft(pair.references, pair.target.vocab_size, 1.0, 0, pair.target.device, "mine")
    for draft in (synthetic, SimulatedCost(synthetic, 0.0)):
        pair.draft, pair.references = draft, {}
        synthetic.references = pair.references
        out = generate(pair, "ba be", "spec", 4, 20)
        assert out.greedy is None and out.spec.tokens == reference(pair.target, out.prompt_ids, 20, pair.eos)
        assert out.spec.stats.accept_rate == 1.0


@pytest.mark.parametrize("module", ["specdec_cli.cli", "specdec_cli.cli.app", "specdec_cli.cli.options",
                                    "specdec_cli.cli.requests", "specdec_cli.cli.commands.common"] + [
    f"specdec_cli.cli.commands.{m}_cmd" for m in ("generate", "verify_exactness", "bench", "plan", "fetch", "export",
                                                  "distill", "cards")])
def test_cli_has_no_torch_code(module):
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(module))
    assert "import torch" not in source and "torch." not in source


def test_starting_the_cli_and_reading_cards_loads_no_torch():
    """`specdec --help`, `specdec cards` and card validation need no torch: the draft kinds are
    declared without it (drafts/*_kind.py), and a kind imports its draft class only to build one."""
    import subprocess
    import sys

    code = ("import sys, specdec_cli.cli; from specdec_cli.cards.card import builtin_names, load_card; "
            "[load_card(n) for n in builtin_names()]; "
            "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_generate_json_reports_peak_resident_memory(run):
    """peak_rss_mb is MiB: ru_maxrss is KiB on Linux (bytes on macOS), not passed through raw."""
    import resource
    import sys

    r = run("generate", "-c", "toy", "--json", "ba be")
    assert r.exit_code == 0, r.stderr
    peak = json.loads(r.stdout)["peak_rss_mb"]
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mib = raw / (2**20 if sys.platform == "darwin" else 2**10)
    assert 10 < peak <= mib + 0.1  # a Python process with torch loaded holds more than 10 MiB
