"""decoding.compile: the decode forwards (the decoder's) through torch.compile (kernels.compiled).

Real compiles on a tiny float32 Llama: pinned (greedy and speculative logits bitwise equal,
and both equal to transformers' own greedy `generate` on the eager model, an independent
referee a compiled forward that mishandled the mask or the fixed KV buffer would fail) and free
shapes; the rest with a stand-in for the compiled model that records the shapes it was called
with, so only those two tests pay for compiles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from specdec_cli.engine import kernels
from specdec_cli.cards.card import load_card
from specdec_cli.engine.models import CAPACITY_STEP
from specdec_cli.engine.kvcache import cache_for
from specdec_cli.pair.loading import load_pair

from .conftest import parse_json_lines, transformers_greedy
from .test_pinned import LLAMA


def tiny_card(write_card, **decoding):
    return write_card({"description": "t", "target": f"random:{LLAMA}", "device": "cpu",
                       "draft": {"kind": "early-exit", "layers": 2, "schedule": "fixed"}, "decoding": {"k": 3, "max_tokens": 12, **decoding}})


def recording(monkeypatch) -> list:
    """Stand in for the compiled forward (kernels.compiled, which HFLM.configure calls with the
    decoder's when the pair loads): the eager one, recording each call's [rows, width] and KV capacity."""
    seen = []

    def compile_(decoder):
        def compiled(ids, keys, *args):
            seen.append((*ids.shape, keys[0].shape[2]))
            return decoder(ids, keys, *args)
        return compiled

    monkeypatch.setattr(kernels, "compiled", compile_)
    return seen


def test_compiled_pinned_runs_equal_transformers_greedy_and_each_other_bitwise(run, write_card, one_thread, tmp_path):
    """A real torch.compile (inductor), pinned at width k + 1 = 4: speculative
    and greedy logits bitwise equal, and the tokens transformers' own greedy `generate` on the
    eager model (the independent referee: a compiled forward that mishandled the mask or the
    fixed KV buffer is wrong in both compiled runs alike). A tiny Llama whose text varies, with
    its noisy twin as a model draft, so rounds both reject and accept."""
    from transformers import AutoModelForCausalLM

    from specdec_cli.engine.models import HFLM

    from .checkpoints import TWINS, twin_checkpoints

    target, draft = twin_checkpoints(tmp_path / "llama", *TWINS["llama"], noise=0.01)
    card = write_card({"description": "t", "target": str(target), "device": "cpu", "dtype": "float32",
                       "draft": {"kind": "model", "model": str(draft), "schedule": "fixed"},
                       "decoding": {"k": 3, "max_tokens": 24, "compile": True, "shapes": "pinned"}})
    prompts = [[40, 41, 42, 43, 44, 45], [50, 61, 72, 53]]
    r = run("verify-exactness", "-c", card, "--bitwise", "--json", "-k", "3",
            *(" ".join(f"w{i}" for i in p) for p in prompts))
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 2 and all(c["shapes"] == "pinned" and c["identical"] and c["bitwise"] for c in checks)
    assert all(0 < c["accepted"] < c["drafted"] for c in checks)  # real verifies, rejections among them
    eager = HFLM(AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32))
    for c, prompt in zip(checks, prompts):
        assert len(set(c["spec_tokens"])) > 3  # the text varies: a mask bug would show
        assert c["spec_tokens"] == transformers_greedy(eager, prompt, 24)


def test_compiled_free_shapes_equal_greedy(run, write_card, one_thread):
    """Free shapes, compiled over a fixed KV capacity (float32 default): two graphs, the plain
    step's width 1 and one over every width 2..k+1 (traced once, not once per width)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    r = run("generate", "-c", tiny_card(write_card, compile=True), "-m", "both", "--json", "ab cd ab cd ab")
    assert r.exit_code == 0, r.stderr
    assert counters["stats"]["unique_graphs"] - before == 2
    out = parse_json_lines(r.stdout)[0]
    assert out["shapes"] == "free" and out["forward_policy"]["compile"] and out["identical"]


def test_compiled_graphs_are_kept_in_specdecs_cache_and_serve_the_next_load(write_card, one_thread):
    """A shape compiles once per machine: a first process writes inductor's graphs under the user
    cache (this test's own, conftest) and a second one finds them there instead of compiling
    again (torch's own counters, printed by each process)."""
    import json
    import os
    import subprocess
    import sys

    from specdec_cli.files import cache_dir

    card = tiny_card(write_card, compile=True, shapes="pinned")
    script = ("import json, sys; from typer.testing import CliRunner; from specdec_cli.cli.app import app; "
              "r = CliRunner().invoke(app, sys.argv[1:]); assert r.exit_code == 0, r.output; "
              "from torch._dynamo.utils import counters; print(json.dumps({k: dict(v) for k, v in counters.items()}))")
    # a new process as a user starts it: without the place an earlier compile in this one set
    env = {**{k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}, "OMP_NUM_THREADS": "1"}
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", script, "generate", "-c", str(card), "-m", "greedy", "--json", "ab cd"],
                           capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout.splitlines()[-1]))
    assert any((cache_dir("inductor") / "fxgraph").rglob("*")), "no graph written to specdec's cache"
    first, second = (c.get("aot_autograd", {}) for c in runs)
    assert first.get("autograd_cache_miss") and first.get("autograd_cache_saved"), runs[0]
    assert second.get("autograd_cache_hit") and not second.get("autograd_cache_miss"), runs[1]


def test_a_compile_cache_the_user_named_is_kept(monkeypatch, tmp_path):
    """TORCHINDUCTOR_CACHE_DIR as the user set it is kept; inductor's own default (which an import
    may write into the variable) and a place specdec set before are not the user's."""
    import os

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    ours = Path(os.environ["XDG_CACHE_HOME"]) / "specdec" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert kernels.compile_cache() == tmp_path / "mine" and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    for value in (default_cache_dir(), None):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", value) if value else monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
        assert kernels.compile_cache() == ours and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(ours)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the variable still holds our old place
    assert kernels.compile_cache() == tmp_path / "xdg" / "specdec" / "inductor"


def test_compile_runs_pinned_decode_forwards_only_each_shape_warmed_once(write_card, monkeypatch):
    seen = recording(monkeypatch)
    pair = load_pair(load_card(str(tiny_card(write_card, compile=True, shapes="pinned"))))
    assert pair.shapes == "pinned" and pair.policy.as_dict() == {"shapes": "pinned", "matmuls": "off", "compile": True}
    assert pair.target.forms is None  # inductor chooses the compiled forward's matmuls
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


def test_each_compile_is_shown_on_stderr_once(run, write_card, monkeypatch):
    """A compile takes tens of seconds the first time: generate says which shape compiles, and
    when it is done, once per shape (free shapes: widths 1..k+1), on stderr; stdout stays JSON."""
    recording(monkeypatch)
    r = run("generate", "-c", tiny_card(write_card, compile=True), "-m", "both", "--json", "ab cd ab cd ab")
    assert r.exit_code == 0, r.stderr
    parse_json_lines(r.stdout)
    starts = [line for line in r.stderr.splitlines() if line.startswith("compiling the target's decode forward")]
    assert [line.split(" over ")[0].rsplit(" ", 2)[1:] for line in starts] == [["[1,", f"{n}]"] for n in (1, 2, 3, 4)]
    assert all(f"over {CAPACITY_STEP} KV columns (cached in " in line for line in starts), starts
    assert sum(line.startswith("compiled in ") for line in r.stderr.splitlines()) == 4


def test_compiled_free_shapes_warm_every_width_before_the_clock(write_card, monkeypatch):
    """Free shapes under compile: [1, n] for n = 1..k+1 over a fixed capacity, each warmed once
    up front (a compile inside a request would be timed), the prefill eager."""
    seen = recording(monkeypatch)
    pair = load_pair(load_card(str(tiny_card(write_card, compile=True))))
    assert pair.shapes == "free"
    spec = pair.spec([5, 9, 5, 9, 17, 5], 3, 12)
    warmed = {(1, n, CAPACITY_STEP) for n in (1, 2, 3, 4)}
    assert seen[:4] == sorted(warmed) and pair.target.warmed == warmed
    assert len(seen) == 4 + spec.stats.target_forwards - 1 and set(seen) <= warmed
    assert spec.tokens == pair.greedy([5, 9, 5, 9, 17, 5], 12).tokens and len(seen) == 4 + spec.stats.target_forwards - 1 + 12


def test_a_compiled_bench_names_the_width_1_greedy_it_beat_or_lost_to(run, write_card, one_thread, monkeypatch):
    monkeypatch.setattr(kernels, "compiled", lambda decoder: decoder)  # eager stand-in
    r = run("bench", "-c", tiny_card(write_card, compile=True, shapes="pinned"), "--prompts-file", "-", "--repeats", "1", "--json",
            input='{"id": "a", "prompt": "ab cd ef"}\n')
    assert r.exit_code == 0, r.stderr
    rows = [x for x in parse_json_lines(r.stdout) if x.get("row") == "bench"]
    assert rows and all(x["compiled"] and x["identical"] and x["free_greedy_wall_s"] > 0 for x in rows)
    for x in rows:
        assert x["baseline"] == ("pinned greedy" if x["pinned_greedy_wall_s"] < x["free_greedy_wall_s"] else "width-1 greedy")


@pytest.mark.parametrize("where", ["card", "option"])
def test_compile_refuses_the_weight_major_audit(run, write_card, where):
    if where == "card":
        card, args = tiny_card(write_card, compile=True, matmuls="all"), []
        expected, named = f"{card}: decoding.compile: true", "decoding.matmuls"
    else:
        card, args = tiny_card(write_card), ["--compile", "--matmuls", "all"]
        expected, named = "command line: --compile: true", "--matmuls"
    r = run("generate", "-c", card, *args, "hello")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == (f"Error: {expected} takes inductor's matmuls or the prepacked weights, "
                                f"got {named}: all; use measure, off or packed")


def test_a_compiled_packed_target_calls_the_prepacked_weights_and_speculation_equals_its_greedy(write_card, one_thread):
    """compile with matmuls: packed: the compiled graph calls oneDNN's prepacked weights (the
    opaque op specdec::packed_linear, once per q/k/v, o, gate/up and down of each layer), the
    plain weights are freed, and speculative output equals the compiled greedy's. Keyed apart
    from inductor's own forms."""
    from specdec_cli.engine import costs

    pair = load_pair(load_card(str(tiny_card(write_card, compile=True, matmuls="packed", shapes="pinned"))))
    assert pair.target.compiled and pair.policy.as_dict()["matmuls"] == "packed" and pair.target.forms.whole
    assert costs.matmuls(pair.target) == "compiled packed"
    prompt = [5, 9, 5, 9, 17, 5, 9, 5]
    greedy = pair.greedy(prompt, 12, 3)
    spec = pair.spec(prompt, 3, 12)
    assert spec.tokens == greedy.tokens and len(greedy.tokens) == 12
    with torch.profiler.profile() as p:  # two decode forwards (the prefill runs eagerly, oneDNN's op itself)
        pair.greedy(prompt, 2, 3)
    assert sum(e.name == "specdec::packed_linear" for e in p.events()) == 2 * 4 * pair.target.config.num_hidden_layers


def test_compile_must_be_a_boolean(run, write_card):
    card = write_card({**yaml.safe_load(tiny_card(write_card).read_text()), "decoding": {"compile": "yes"}})
    r = run("generate", "-c", card, "hello")
    assert r.exit_code == 2 and r.stderr.strip().startswith(f"Error: {card}: decoding.compile: ")


def test_the_cost_profile_of_a_compiled_target_times_its_compiled_forwards(write_card, monkeypatch):
    """Keyed apart from the eager profile, timed through the loop's fixed-capacity cache: one
    capacity for both probe contexts, so the requests after it reuse the same graphs."""
    from specdec_cli.engine import costs

    seen = recording(monkeypatch)
    pair = load_pair(load_card(str(tiny_card(write_card, compile=True))))
    profile = pair.cost_profile((), 4)
    assert profile.key["matmuls"] == "compiled" and costs.matmuls(pair.target) == "compiled"
    widths = {n for _, n, _ in seen}
    assert widths == set(range(1, profile.widths + 1)) and len({c for *_, c in seen}) == 1
    capacity = seen[0][2]
    pair.spec([5, 9, 5, 9, 17, 5], 3, 12)
    assert {c for *_, c in seen} == {capacity} and pair.target.capacity == capacity


def test_without_compile_nothing_is_warmed_or_compiled(write_card):
    pair = load_pair(load_card(str(tiny_card(write_card))))
    assert not pair.target.compiled and "compile" not in pair.policy.as_dict()
    cache = cache_for(pair.target, rows=1, width=None, capacity=64)
    cache.warm([1, 2])
    assert pair.target.warmed == set() and cache.capacity == cache.COLUMNS and not cache.fixed


def test_compile_needs_a_target_specdecs_cache_holds(run):
    r = run("generate", "-c", "toy", "--compile", "ba be")
    assert r.exit_code == 2 and r.stdout == ""
    path = load_card("toy").path
    assert r.stderr.strip() == (f"Error: {path}: decoding.compile: true needs a transformers target held in specdec's "
                                "own KV cache (a compiled forward's shape is fixed there), got toy")


def test_a_compiled_batch_times_its_rectangles_at_a_fixed_capacity(run, write_card, one_thread, monkeypatch):
    """--batch with the cost schedule times [rows, n] through the loop's cache: under compile it
    needs the fixed capacity every compiled forward has (it crashed without one)."""
    monkeypatch.setattr(kernels, "compiled", lambda decoder: decoder)  # eager stand-in
    card = write_card({"description": "t", "target": f"random:{LLAMA}", "device": "cpu",
                       "draft": {"kind": "prompt-lookup"}, "decoding": {"k": 3, "max_tokens": 12, "compile": True}})
    r = run("generate", "-c", card, "--batch", "2", "--json", "--prompts-file", "-",
            input='{"prompt": "ab ab ab"}\n{"prompt": "cd cd"}\n')
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    assert [x["identical"] for x in rows if "id" in x] == [True, True] and rows[-1]["summary"]["differ"] == 0
