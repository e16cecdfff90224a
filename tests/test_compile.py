"""decoding.compile: pinned decode forwards through torch.compile (kernels.compiled).

One real compile on a tiny float32 Llama (greedy and speculative logits bitwise equal, the
compiled shapes warmed before any clock starts); the rest with a stand-in for the compiled
model that records the shapes it was called with, so no test pays a second compile."""

from __future__ import annotations

import pytest
import torch
import yaml

from specdec_cli import kernels
from specdec_cli.cards import load_card
from specdec_cli.decoding import CAPACITY_STEP
from specdec_cli.kvcache import cache_for
from specdec_cli.pair import load_pair

from .conftest import parse_json_lines
from .test_pinned import LLAMA


def tiny_card(write_card, **decoding):
    return write_card({"description": "t", "target": f"random:{LLAMA}", "device": "cpu",
                       "draft": {"kind": "early-exit", "layers": 2}, "decoding": {"k": 3, "max_tokens": 12, **decoding}})


def recording(pair) -> list:
    """Stand in for the compiled model: the eager one, recording each call's [rows, width] and
    KV capacity."""
    seen, model = [], pair.target.model

    def compiled(input_ids, cache, **kwargs):
        seen.append((*input_ids.shape, cache.layers[0].keys.shape[2]))
        return model(input_ids=input_ids, cache=cache, **kwargs)

    pair.target.compiled = compiled
    return seen


def test_compiled_speculative_equals_compiled_greedy_bitwise(run, write_card, one_thread):
    """A real torch.compile (inductor, frozen weights) on a tiny float32 model, widths 2 and 4."""
    r = run("verify-exactness", "-c", tiny_card(write_card, compile=True), "--bitwise", "--json", "-k", "1,3",
            "ab cd", "x y z")
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 4 and all(c["shapes"] == "pinned" and c["identical"] and c["bitwise"] for c in checks)


def test_compile_runs_pinned_decode_forwards_only_each_shape_warmed_once(write_card):
    pair = load_pair(load_card(str(tiny_card(write_card, compile=True))))
    assert pair.shapes == "pinned" and pair.policy.as_dict() == {"shapes": "pinned", "matmuls": "off", "compile": True}
    assert pair.target.weight_major is None  # inductor chooses the compiled forward's matmuls
    seen = recording(pair)
    prompt = [5, 9, 5, 9, 17, 5]
    spec = pair.spec(prompt, 3, 12)
    capacity = CAPACITY_STEP  # len(prompt) + 12 + 4, rounded up: requests share a few compiled sizes
    assert set(seen) == {(1, 4, capacity)}  # every decode forward [1, k+1]; the prefill stayed eager
    assert len(seen) == 1 + spec.stats.target_forwards - 1  # the warm-up, then each round (not the prefill)
    assert pair.target.warmed == {(1, 4, capacity)}
    assert pair.greedy(prompt, 12, 3).tokens == spec.tokens
    assert len(seen) == spec.stats.target_forwards + 12  # no second warm-up: the shape has run
    plain = pair.greedy(prompt, 12, free=True)  # bench's plain baseline: compiled at width 1
    assert (1, 1, capacity) in seen and len(plain.tokens) == 12


def test_a_compiled_bench_names_the_width_1_greedy_it_beat_or_lost_to(run, write_card, one_thread, monkeypatch):
    monkeypatch.setattr(kernels, "compiled", lambda model: lambda **kwargs: model(**kwargs))  # eager stand-in
    r = run("bench", "-c", tiny_card(write_card, compile=True), "--prompts-file", "-", "--repeats", "1", "--json",
            input='{"id": "a", "prompt": "ab cd ef"}\n')
    assert r.exit_code == 0, r.stderr
    rows = [x for x in parse_json_lines(r.stdout) if x.get("row") == "bench"]
    assert rows and all(x["compiled"] and x["identical"] and x["free_greedy_wall_s"] > 0 for x in rows)
    for x in rows:
        assert x["baseline"] == ("pinned greedy" if x["pinned_greedy_wall_s"] < x["free_greedy_wall_s"] else "width-1 greedy")


@pytest.mark.parametrize("where", ["card", "option"])
@pytest.mark.parametrize("clash", [{"shapes": "free"}, {"matmuls": "packed"}])
def test_compile_refuses_free_shapes_and_forced_matmuls(run, write_card, where, clash):
    (field, value), = clash.items()
    if where == "card":
        card, args = tiny_card(write_card, compile=True, **clash), []
        expected = f"{card}: decoding.compile: true"
        named = f"decoding.{field}"
    else:
        card, args = tiny_card(write_card), ["--compile", f"--{field}", value]
        expected, named = "command line: --compile: true", f"--{field}"
    r = run("generate", "-c", card, *args, "hello")
    assert r.exit_code == 2 and r.stdout == ""
    reason = ("needs pinned shapes (a compiled forward keeps one shape)" if field == "shapes"
              else "chooses its own matmuls (inductor prepacks the weights)")
    fix = "use pinned or auto" if field == "shapes" else "use measure or off"
    assert r.stderr.strip() == f"Error: {expected} {reason}, got {named}: {value}; {fix}"


def test_compile_must_be_a_boolean(run, write_card):
    card = write_card({**yaml.safe_load(tiny_card(write_card).read_text()), "decoding": {"compile": "yes"}})
    r = run("generate", "-c", card, "hello")
    assert r.exit_code == 2 and r.stderr.strip().startswith(f"Error: {card}: decoding.compile: ")


def test_warm_is_a_no_op_in_free_shapes(write_card):
    pair = load_pair(load_card(str(tiny_card(write_card))))
    seen = recording(pair)
    cache = cache_for(pair.target, rows=1, width=None, capacity=64)
    cache.warm()
    assert seen == [] and pair.target.warmed == set()
    with torch.inference_mode():
        pair.greedy([5, 9, 17], 4, free=True)
    assert seen == []  # not compiled: free shapes stay eager
