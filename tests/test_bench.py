"""`specdec bench` on the toy backend (and tiny random transformers models for the transformers
peer): exactness, the agreement sweep's seed claims, rows and files, usage errors, interrupts.
No timing assertions here: timing claims live in benchmarks/RESULTS.md."""

from __future__ import annotations

import csv
import json
import math

import pytest

from specdec_cli.eval import bench, benchrows
from specdec_cli.engine import costs
from specdec_cli.cards.card import DraftSpec, load_card
from specdec_cli.loop.metrics import expected_speedup, expected_tokens_per_round
from specdec_cli.pair.loading import build_draft, load_pair
from specdec_cli.eval.peers import hf_generate, transformers_peer
from specdec_cli.cards.prompts import SUITE, Prompt

from .conftest import parse_json_lines

LONG = ["ta te ti", "ba da", "ba fa"]  # toy prompts whose greedy output runs 60 tokens (no EOS)
MIXED = LONG + ["ba be bi", "ka ke ki ko", "la le li lo lu"]  # some stop at EOS before 60


@pytest.fixture(autouse=True)
def quick_probes(monkeypatch):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 2)  # cost probes: a few forwards are enough here


@pytest.fixture
def prompts_file(tmp_path):
    def write(texts, name="p.jsonl"):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
        return path
    return write


@pytest.fixture
def tiny_card(tmp_path, write_card, one_thread):
    """A card on a tiny random Llama (no download): the transformers peer in seconds. One torch
    thread: on a busy 2-core machine two threads wait on each other for ~100x a tiny forward."""
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
              "max_position_embeddings": 512, "tie_word_embeddings": True}
    (tmp_path / "tiny-llama.json").write_text(json.dumps(config))

    def card(draft: dict, k=4, max_tokens=30):
        return write_card({"description": "tiny llama", "target": "random:tiny-llama.json", "draft": draft,
                           "decoding": {"k": k, "max_tokens": max_tokens}, "device": "cpu"}, name=draft["kind"])
    return card


def rows_of(stdout: str, **match) -> list[dict]:
    return [r for r in parse_json_lines(stdout) if all(r.get(k) == v for k, v in match.items())]


# ---------------------------------------------------------------------------- the plain bench
def test_bench_table_per_category_and_overall(run):
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "24")
    assert r.exit_code == 0, r.stderr
    for label in ("Greedy vs speculative", "conversation", "translation", "code", "overall", "speedup", "identical"):
        assert label in r.stdout
    assert "7/7 speculative outputs identical to greedy" in r.stderr


def test_bench_json_rows(run):
    r = run("bench", "-c", "toy", "-r", "2", "--limit", "1", "-n", "24", "--json")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)  # stdout is nothing but JSON lines
    prompts = [x for x in rows if x["scope"] == "prompt"]
    categories = [x for x in rows if x["scope"] == "category"]
    (overall,) = [x for x in rows if x["scope"] == "all"]
    assert [x["name"] for x in prompts] == [p.id for p in SUITE if p.id.endswith("-1")]
    assert {x["name"] for x in categories} == {p.category for p in SUITE}
    assert all(x["card"] == "toy" and x["repeats"] == 2 and x["k"] == 4 and x["draft"] == "toy(agree=0.7)+cost" for x in rows)
    for key in ("tokens", "verify_rounds", "target_forwards", "draft_forwards", "drafted", "accepted"):
        assert overall[key] == sum(x[key] for x in prompts) == sum(x[key] for x in categories)
    assert overall["identical"] is True and overall["prompts"] == 7
    assert overall["speedup"] == pytest.approx(overall["greedy_wall_s"] / overall["wall_s"])
    assert overall["tokens_per_round"] == pytest.approx(overall["tokens"] / overall["verify_rounds"])
    # draft and target are two components of one resident pair, and both are called
    assert all(x["draft_forwards"] > 0 and x["target_forwards"] > 0 for x in prompts)


def test_bench_matches_the_library_outputs(prompts_file):
    """The bench's counters come from the same decodes a user gets from `generate`."""
    pair = load_pair(load_card("toy"))
    prompts = [Prompt(f"p{i}", t) for i, t in enumerate(MIXED)]
    rows = list(bench.run(pair, prompts, bench.configs(pair, [4], None), 60, 1))
    fresh = load_pair(load_card("toy"))
    for prompt, row in zip(prompts, rows):
        ids = fresh.encode(prompt.text, 60)
        spec = fresh.spec(ids, 4, 60)
        assert (row.tokens, row.verify_rounds, row.accepted) == (len(spec.tokens), spec.stats.verify_rounds, spec.stats.accepted)
        assert row.identical and spec.tokens == fresh.greedy(ids, 60).tokens


# ---------------------------------------------------------------------------- the agreement sweep
def test_agreement_sweep_seed_claims(run, prompts_file):
    r = run("bench", "-c", "toy", "--agree-sweep", "0.3,0.7,1.0", "-k", "4", "-n", "60", "-r", "1", "--json",
            "--prompts-file", prompts_file(MIXED))
    assert r.exit_code == 0, r.stderr
    pair = load_pair(load_card("toy"))
    by_agree = {a: rows_of(r.stdout, scope="prompt", agree=a) for a in (0.3, 0.7, 1.0)}
    for i, text in enumerate(MIXED):
        greedy = pair.greedy(pair.encode(text, 60), 60).tokens
        runs = [by_agree[a][i] for a in (0.3, 0.7, 1.0)]
        # exactness at every agreement: the same output, equal to greedy
        assert all(x["identical"] and x["tokens"] == len(greedy) for x in runs), text
        # fewer verify rounds (more tokens per round) as agreement rises, for the same output
        if len(greedy) >= 30:
            assert runs[0]["verify_rounds"] > runs[1]["verify_rounds"] > runs[2]["verify_rounds"], text
            assert runs[0]["tokens_per_round"] < runs[1]["tokens_per_round"] < runs[2]["tokens_per_round"], text
        # agreement 1.0 at k=4: every round emits k+1 tokens (the last one trimmed at EOS/max)
        full = runs[2]
        assert full["accept_rate"] == 1.0 and full["agreement_est"] == 1.0 and full["rejected_rounds"] == 0
        assert full["verify_rounds"] == math.ceil(full["tokens"] / 5)
        if text in LONG:
            assert full["tokens"] == 60 and full["tokens_per_round"] == 5.0
    overall = {x["agree"]: x for x in rows_of(r.stdout, scope="all")}
    assert overall[0.3]["tokens_per_round"] < overall[0.7]["tokens_per_round"] < overall[1.0]["tokens_per_round"]
    assert overall[0.3]["verify_rounds"] > overall[0.7]["verify_rounds"] > overall[1.0]["verify_rounds"]
    # theory columns: the Leviathan formulas at the set agreement, with the probed costs
    assert overall[1.0]["theory_tokens_per_round"] == 5.0
    assert overall[0.3]["theory_tokens_per_round"] == pytest.approx((1 - 0.3**5) / 0.7)
    for a, x in overall.items():
        assert x["verify_cost"] > 0 and x["draft_cost"] == 0 and x["draft_cost_simulated"] is False
        if a is not None:
            assert x["theory_speedup"] == pytest.approx(x["theory_tokens_per_round"] / x["verify_cost"])
    # the card's own draft is the extra row; no i.i.d. theory for it (its schedule varies the
    # proposal length), but the cost model's prediction from the rounds it actually ran
    card = overall[None]
    assert card["draft"] == "toy(agree=0.7)+cost" and card["theory_tokens_per_round"] is None
    for x in overall.values():  # predicted from measured per-position acceptance: close to measured
        assert x["predicted_tokens_per_round"] == pytest.approx(x["tokens_per_round"], rel=0.15), x
        assert x["predicted_speedup"] > 0


def test_synthetic_draft_agrees_as_set():
    """Over the whole suite the measured per-token agreement is close to the set one."""
    pair = load_pair(load_card("toy"))
    rows = benchrows.summarize(list(bench.run(pair, SUITE, bench.configs(pair, [4], [0.3, 0.5, 0.9]), 64, 1)))
    for row in rows:
        if row.scope == "all" and row.agree is not None:
            assert abs(row.agreement_est - row.agree) < 0.08, (row.agree, row.agreement_est)
            assert row.identical


def test_bare_sweeps_take_the_default_lists(run):
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "12", "--json", "--k-sweep", "2,4", "--agree-sweep")
    assert r.exit_code == 0, r.stderr
    configs = {(x["agree"], x["k"]) for x in rows_of(r.stdout, scope="all")}
    assert configs == {(a, k) for a in (0.3, 0.5, 0.7, 0.9, 1.0, None) for k in (2, 4)}
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "12", "--k-sweep", "--json")
    assert r.exit_code == 0, r.stderr
    assert [x["k"] for x in rows_of(r.stdout, scope="all")] == [1, 2, 3, 4, 6, 8]
    assert all(x["agree"] is None and x["identical"] for x in parse_json_lines(r.stdout))


def test_sweep_table_and_simulated_cost(run):
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "16", "--agree-sweep", "0.5,1",
            "--draft-cost", "0.25", "--seed", "3")
    assert r.exit_code == 0, r.stderr
    for label in ("Sweep", "a set", "a meas.", "theory tok/round", "theory speedup", "0.25 sim", "card", "toy(agree=0.7)"):
        assert label in r.stdout, label
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "16", "--agree-sweep", "0.5", "--draft-cost", "0.25", "--json")
    (synthetic,) = rows_of(r.stdout, scope="all", agree=0.5)
    assert synthetic["draft_cost"] == 0.25 and synthetic["draft_cost_simulated"] is True
    assert "simulated-cost=0.25" in synthetic["draft"]


def test_seed_changes_draws_not_outputs(run):
    outs = []
    for seed in ("0", "1"):
        r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "40", "--agree-sweep", "0.5", "--seed", seed, "--json")
        outs.append({x["name"]: x for x in rows_of(r.stdout, scope="prompt", agree=0.5)})
    assert all(x["identical"] for o in outs for x in o.values())
    assert [x["tokens"] for x in outs[0].values()] == [x["tokens"] for x in outs[1].values()]
    assert [x["accepted"] for x in outs[0].values()] != [x["accepted"] for x in outs[1].values()]


# ---------------------------------------------------------------------------- files
def test_csv_and_plot(run, tmp_path):
    out_csv, out_png, out_svg = tmp_path / "b.csv", tmp_path / "b.png", tmp_path / "b.svg"
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "16", "--agree-sweep", "0.5,1", "--k-sweep", "2,4",
            "--csv", out_csv, "--plot", out_png)
    assert r.exit_code == 0, r.stderr
    table = list(csv.DictReader(out_csv.open()))
    assert len(table) == 6 * (7 + 7 + 1)  # 6 configurations x (7 prompts + 7 categories + overall)
    assert {x["scope"] for x in table} == {"prompt", "category", "all"} and all(x["identical"] == "True" for x in table)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "16", "--k-sweep", "1,2", "--plot", out_svg)
    assert r.exit_code == 0 and "<svg" in out_svg.read_text()
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files


# ---------------------------------------------------------------------------- one resident pair
def test_draft_and_target_are_both_called():
    pair = load_pair(load_card("toy"))
    calls = {"target": 0, "draft": 0}
    target_forward, draft_propose = pair.target.forward, pair.draft.propose

    def counted_forward(*a, **kw):
        calls["target"] += 1
        return target_forward(*a, **kw)

    def counted_propose(*a, **kw):
        calls["draft"] += 1
        return draft_propose(*a, **kw)

    pair.target.forward, pair.draft.propose = counted_forward, counted_propose
    rows = list(bench.run(pair, [Prompt("a", "ta te ti")], bench.configs(pair, [4], None), 40, 1))
    assert calls["target"] > 0 and calls["draft"] > 0
    assert rows[0].draft_forwards > 0 and rows[0].target_forwards > 0


def _interleaved_vs_alone(load, drafts, a: str, b: str, k=3, n=40):
    """Requests A, B, A on one resident pair == each request on a freshly loaded pair."""
    def request(pair, draft, text):
        ids = pair.encode(text, n)
        greedy = pair.greedy(ids, n)  # the synthetic draft reads the greedy reference
        spec = pair.spec(ids, k, n, draft)
        return greedy.tokens, spec.tokens, [(x.drafted, x.accepted, x.emitted) for x in spec.rounds]

    shared = load()
    for spec in drafts:
        draft = build_draft(spec, shared) if spec else shared.draft
        together = [request(shared, draft, text) for text in (a, b, a)]
        alone = {}
        for text in (a, b):
            fresh = load()
            alone[text] = request(fresh, build_draft(spec, fresh) if spec else fresh.draft, text)
        assert together == [alone[a], alone[b], alone[a]], spec
        assert all(greedy == tokens for greedy, tokens, _ in together)


def test_interleaved_requests_do_not_leak_state_toy():
    _interleaved_vs_alone(lambda: load_pair(load_card("toy")),
                          [None, DraftSpec("synthetic", agree=0.6, seed=2), DraftSpec("prompt-lookup", schedule="heuristic")],
                          "ta te ti", "ba be bi")


def test_interleaved_requests_do_not_leak_state_model_draft(tiny_card):
    """The stateful kind: a model draft with its own KV cache, under the adaptive schedule."""
    card = tiny_card({"kind": "early-exit", "layers": 2, "schedule": "heuristic"})
    _interleaved_vs_alone(lambda: load_pair(load_card(str(card))), [None], "the cat sat on the mat", "abc abc abc", n=24)


# ---------------------------------------------------------------------------- transformers peer
@pytest.mark.parametrize("draft", [{"kind": "prompt-lookup", "schedule": "heuristic"}, {"kind": "early-exit", "layers": 2}],
                         ids=["prompt-lookup", "early-exit"])
def test_vs_transformers_on_a_tiny_model(run, tiny_card, prompts_file, draft):
    texts = ["the cat sat on the mat and the cat", "abc abc abc abc"]
    r = run("bench", "-c", tiny_card(draft, max_tokens=20), "-r", "1", "--vs-transformers", "--json",
            "--prompts-file", prompts_file(texts))
    assert r.exit_code == 0, r.stderr
    peers = rows_of(r.stdout, row="transformers", scope="prompt")
    assert [(x["name"], x["mode"]) for x in peers] == [("p0", "greedy"), ("p0", "assisted"), ("p1", "greedy"), ("p1", "assisted")]
    for x in peers:
        assert x["identical"] is True and x["tokens"] == x["hf_tokens"] == 20
        assert x["hf_target_forwards"] > 0 and x["ratio"] > 0
    assisted = rows_of(r.stdout, row="transformers", scope="all", mode="assisted")[0]
    assert assisted["k"] == 4 and assisted["draft"] == {"prompt-lookup": "prompt-lookup+heuristic"}.get(draft["kind"], "early-exit(layers=2)+cost")
    # a fixed k of 4 emits at most 5 tokens per target forward
    assert assisted["hf_target_forwards"] >= math.ceil(assisted["hf_tokens"] / 5)


def test_vs_transformers_table(run, tiny_card, prompts_file):
    r = run("bench", "-c", tiny_card({"kind": "prompt-lookup"}, max_tokens=12), "-r", "1", "--vs-transformers",
            "--prompts-file", prompts_file(["abc abc abc"]))
    assert r.exit_code == 0, r.stderr
    for label in ("specdec vs transformers", "transformers tok/s", "ratio", "greedy", "assisted", "prompt-lookup"):
        assert label in r.stdout, label


def test_fixed_k_settings_are_restored(tiny_card):
    pair = load_pair(load_card(str(tiny_card({"kind": "early-exit", "layers": 2}))))
    config = pair.target.model.generation_config
    before = (config.num_assistant_tokens, config.num_assistant_tokens_schedule, config.assistant_confidence_threshold)
    peer = transformers_peer(pair, 3)
    ids = pair.encode("abc abc", 12)
    tokens, wall, forwards = hf_generate(pair, ids, 12, peer)
    assert tokens == pair.greedy(ids, 12).tokens and wall > 0 and forwards >= 3
    assert (config.num_assistant_tokens, config.num_assistant_tokens_schedule, config.assistant_confidence_threshold) == before


# ---------------------------------------------------------------------------- errors, interrupts
def test_bench_usage_errors_are_one_line_exit_2(run, tmp_path):
    cases = [
        (("--agree-sweep", "1.5"), "--agree-sweep: must be a number in [0, 1], got 1.5"),
        (("--agree-sweep", "-0.3"), "--agree-sweep: must be a number in [0, 1], got -0.3"),
        (("--agree-sweep", "0.5,x"), "--agree-sweep: expected numbers in [0, 1]"),
        (("--agree-sweep", "0.5,0.5"), "--agree-sweep: 0.5 given more than once"),
        (("--k-sweep", "0,2"), "--k-sweep: must be an integer in 1..64, got 0"),
        (("-k", "4", "--k-sweep", "2,4"), "give -k or --k-sweep, not both"),
        (("--plot", tmp_path, "--agree-sweep"), "is a directory"),
        (("--plot", tmp_path / "x.txt", "--agree-sweep"), "--plot: file name must end in .png, .svg, .pdf"),
        (("--plot", tmp_path / "x.png"), "--plot: plots a sweep"),
        (("--plot", tmp_path / "nope" / "x.png", "--k-sweep"), "does not exist"),
        (("--csv", tmp_path / "nope" / "x.csv"), "does not exist"),
        (("--draft-cost", "0.1"), "--draft-cost: simulates the synthetic draft's cost; needs --agree-sweep"),
        (("--draft-cost", "-1", "--agree-sweep"), "--draft-cost: must be a number of target steps in [0, 100]"),
        (("--seed", "3"), "--seed: seeds the synthetic draft (--agree-sweep) or sampling (--temperature > 0); neither is on"),
        (("--repeats", "0"), "--repeats: must be an integer in 1..1000, got 0"),
        (("--limit", "0"), "--limit: must be an integer in 1..1000000, got 0"),
        (("--vs-transformers",), "--vs-transformers: needs a transformers target"),
    ]
    for args, message in cases:
        r = run("bench", "-c", "toy", "-n", "8", "-r", "1", *args)
        assert r.exit_code == 2, (args, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, (args, r.stderr)


def test_interrupt_keeps_finished_rows(run, monkeypatch):
    real = bench.run

    def interrupted(*a, **kw):
        for i, row in enumerate(real(*a, **kw)):
            if i == 2:
                raise KeyboardInterrupt
            yield row

    monkeypatch.setattr(bench, "run", interrupted)
    r = run("bench", "-c", "toy", "-r", "1", "-n", "12", "--json")
    assert r.exit_code == 130
    done = rows_of(r.stdout, row="bench")
    assert [x["name"] for x in done] == ["conv-1", "conv-2"] and all(x["scope"] == "prompt" for x in done)
    r = run("bench", "-c", "toy", "-r", "1", "-n", "12")
    assert r.exit_code == 130 and "INTERRUPTED after 2 of 22 prompts" in r.stdout
    assert "Interrupted after 2 of 22 prompts" in r.stderr


def test_summarize_and_theory():
    def row(name, category, tokens, rounds, greedy_s, spec_s, identical=True):
        return benchrows.BenchRow(scope="prompt", name=name, category=category, draft="d", k=4, agree=0.5, prompts=1,
                                  tokens=tokens, verify_rounds=rounds, target_forwards=rounds + 1, draft_forwards=8,
                                  drafted=8, accepted=4, rejected_rounds=2, greedy_wall_s=greedy_s, wall_s=spec_s,
                                  baseline_tokens=tokens, identical=identical, verify_cost=1.5, draft_cost=0.1,
                                  draft_cost_simulated=False)

    rows = [row("a", "x", 10, 5, 1.0, 0.5), row("b", "x", 20, 4, 2.0, 1.0), row("c", "y", 6, 6, 1.0, 2.0, False)]
    out = {(r.scope, r.name): r for r in benchrows.summarize(rows)}
    assert list(out) == [("category", "x"), ("category", "y"), ("all", "all")]
    x, total = out[("category", "x")], out[("all", "all")]
    assert (x.tokens, x.verify_rounds, x.prompts, x.identical) == (30, 9, 2, True)
    assert x.speedup == pytest.approx(3.0 / 1.5) and total.identical is False and total.tokens == 36
    assert total.agreement_est == pytest.approx(12 / (12 + 6))
    assert total.theory_tokens_per_round == expected_tokens_per_round(0.5, 4) == pytest.approx(1.9375)
    assert total.theory_speedup == pytest.approx(1.9375 / (4 * 0.1 + 1.5)) == expected_speedup(0.5, 4, 0.1, verify=1.5)
    assert expected_speedup(0.5, 4, 0.1) == pytest.approx(1.9375 / 1.4)  # the paper's verify = 1 step


# ---------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_smollm2_bench_and_transformers_agree(smollm2_pair):
    pair = smollm2_pair
    prompts = [Prompt("rag", SUITE[15].text, "rag")]
    configs = bench.configs(pair, [4], [1.0])
    rows = list(bench.run(pair, prompts, configs, 24, 1, transformers_peer(pair, 4)))
    spec_rows = [r for r in rows if isinstance(r, benchrows.BenchRow)]
    peer_rows = [r for r in rows if isinstance(r, benchrows.PeerRow)]
    assert all(r.identical for r in rows) and len(spec_rows) == 2 and len(peer_rows) == 2
    assert spec_rows[0].accept_rate == 1.0 and spec_rows[0].verify_rounds == math.ceil(spec_rows[0].tokens / 5)
    assert all(r.tokens == r.hf_tokens for r in peer_rows)
    assert 0 < spec_rows[1].verify_cost and spec_rows[1].draft_cost == 0  # prompt lookup makes no model call


# ---------------------------------------------------------------------------- sampling
def test_bench_sampling_times_speculative_sampling_against_plain_sampling(run):
    args = ("bench", "-c", "toy", "-r", "1", "-n", "24", "--limit", "1", "-t", "0.8", "--seed", "5", "--json")
    r = run(*args)
    assert r.exit_code == 0, r.stderr
    rows = rows_of(r.stdout, row="bench", scope="prompt")
    assert len(rows) == 7 and all(x["identical"] is None for x in rows)  # not compared when sampling
    assert "not token for token" in r.stderr
    # the same tokens as the library's speculative sampling with the same seed, and reproducible
    card = load_card("toy")
    from dataclasses import replace

    pair = load_pair(replace(card, temperature=0.8, seed=5))
    first = next(p for p in SUITE if p.id == rows[0]["name"])
    ids = pair.encode(first.text, 24)
    assert rows[0]["tokens"] == pair.spec(ids, card.k, 24).stats.tokens
    assert rows[0]["baseline_tokens"] == pair.sample(ids, 24).stats.tokens
    again = rows_of(run(*args).stdout, row="bench", scope="prompt")
    assert [x["tokens"] for x in again] == [x["tokens"] for x in rows]
    assert [x["accepted"] for x in again] == [x["accepted"] for x in rows]


@pytest.mark.parametrize("extra, message", [
    (("-t", "0.8", "--agree-sweep"), "--agree-sweep: the synthetic draft's agreement is defined for greedy"),
    (("-c", "random-llama-1b", "-t", "0.8", "--vs-transformers"), "--vs-transformers: compares greedy outputs"),
    (("--seed", "3"), "--seed: seeds the synthetic draft (--agree-sweep) or sampling"),
    (("-t", "-1"), "--temperature"),
])
def test_bench_sampling_usage_errors(run, extra, message):
    card = () if "-c" in extra else ("-c", "toy")
    r = run("bench", *card, "-r", "1", "-n", "8", "--limit", "1", *extra)  # errors come before any load
    assert r.exit_code == 2 and message in r.stderr and r.stderr.startswith("Error: "), r.stderr
