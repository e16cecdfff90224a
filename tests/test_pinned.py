"""Pinned shapes: in bfloat16 and float16, speculative decoding equals greedy bitwise, tokens
and logits.

Every decode-phase forward is [rows, W] over a KV buffer of fixed capacity (kvcache.py), so a
position's logits do not depend on whether it was decoded alone or inside a verify. Tiny random
models: Llama-shaped, Qwen2-shaped (attention biases) and Gemma-3-shaped (sliding-window layers,
window 8, under full-attention ones), with random drafts, k, batch sizes and prompt lengths. A
fixed case shows free shapes do diverge, so the pinned test cannot pass vacuously. Pinned against
an independent referee (transformers' generate): tests/test_reference.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_cli.cards.card import load_card
from specdec_cli.loop.decoding import NoDraft, decode_rows, greedy_decode, speculative_decode
from specdec_cli.loop.tree import Proposal
from specdec_cli.drafts import ModelDraft, OracleDraft
from specdec_cli.errors import SpecdecError
from specdec_cli.engine import kernels
from specdec_cli.engine.models import HFLM
from specdec_cli.pair.loading import forward_policy
from specdec_cli.eval.verify import logit_rows

from .checkpoints import TWINS, twin_checkpoints, twins
from .conftest import parse_json_lines

LLAMA = TWINS["llama"][0]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
NO_EOS = frozenset()


@pytest.fixture(scope="module")
def models():
    """Each shape's target and its noisy twin as a draft, in bfloat16 and in float16."""
    torch.set_num_threads(1)
    out = {}
    for name, shape in TWINS.items():
        for dtype, torch_dtype in DTYPES.items():
            out[name, dtype] = tuple(HFLM(m.to(torch_dtype)) for m in twins(*shape))
    return out


def random_draft(reference: dict, agree: float, seed: int):
    """Proposes the target's own greedy token with probability `agree`, else another one."""
    def oracle(tokens: list[int]) -> int:
        prompt, out = next((p, o) for p, o in reference.values() if tokens[: len(p)] == p)
        i = len(tokens) - len(prompt)
        return out[i] if i < len(out) else 0

    return OracleDraft(oracle, 512, agree, seed, torch.device("cpu"), "random")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.sampled_from(sorted(TWINS)), dtype=st.sampled_from(sorted(DTYPES)), k=st.integers(1, 8),
       batch=st.integers(1, 3), agree=st.sampled_from([0.0, 0.5, 0.9]), seed=st.integers(0, 99),
       lengths=st.lists(st.integers(1, 20), min_size=1, max_size=4))
def test_pinned_speculative_equals_greedy_bitwise(models, config, dtype, k, batch, agree, seed, lengths):
    target, _ = models[config, dtype]
    prompts = [[(seed + 7 * i + 3 * j) % 500 + 1 for j in range(n)] for i, n in enumerate(lengths)]
    width, n = k + 1, 24
    greedy = dict(decode_rows(target, NoDraft(target.device), prompts, 0, n, NO_EOS, batch, width=width, trace=True))
    reference = {i: (prompts[i], greedy[i].tokens) for i in greedy}
    spec = dict(decode_rows(target, random_draft(reference, agree, seed), prompts, k, n, NO_EOS, batch,
                            width=width, trace=True))
    for i in range(len(prompts)):
        assert spec[i].tokens == greedy[i].tokens and spec[i].stats.drafted > 0
        assert logit_rows(greedy[i].logits, spec[i].logits) == {"bitwise": True, "logit_rows": n, "bitwise_divergence": None}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("config", ["llama", "qwen2"])
def test_free_shapes_drift_where_pinned_ones_do_not(models, config, dtype):
    """The contrast: a noisy-twin draft on the same prompt. Free shapes (1-token steps, (d+1)-token
    verifies) give logits that differ in the last bits, and in bfloat16 the tokens part too."""
    target, draft = models[config, dtype]
    prompt = list(range(3, 15))
    runs = {}
    for width in (None, 5):
        greedy = greedy_decode(target, prompt, 80, NO_EOS, width=width, trace=True)
        spec = speculative_decode(target, ModelDraft(draft, 512), prompt, 4, 80, NO_EOS, width=width, trace=True)
        runs[width] = (greedy.tokens == spec.tokens, logit_rows(greedy.logits, spec.logits))
        assert 0 < spec.stats.accept_rate < 1  # real rejections: rollback under both shapes
    identical, rows = runs[None]
    assert not rows["bitwise"] and rows["bitwise_divergence"]["max_abs_diff_all"] > 0
    assert not identical or dtype == "float16"  # float16's 10-bit mantissa keeps these tokens
    assert runs[5] == (True, {"bitwise": True, "logit_rows": 80, "bitwise_divergence": None})


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_pinned_sliding_window_crosses_the_window_bitwise(models, dtype):
    """Gemma-3-like: sliding layers (window 8) under full ones, a prompt of 30 tokens, 60 more,
    with rounds that reject (both caches roll back across the window) and rounds that keep all."""
    target, draft = models["gemma3", dtype]
    prompt = list(range(40, 70))
    greedy = greedy_decode(target, prompt, 60, NO_EOS, width=4, trace=True)
    spec = speculative_decode(target, ModelDraft(draft, 512), prompt, 3, 60, NO_EOS, width=4, trace=True)
    assert spec.tokens == greedy.tokens and logit_rows(greedy.logits, spec.logits)["bitwise"]
    assert len(set(greedy.tokens)) > 10  # a text that varies: the window's contents matter
    assert any(r.accepted < r.drafted for r in spec.rounds) and any(r.accepted == r.drafted == 3 for r in spec.rounds)


# ---------------------------------------------------------------------------- from a card
def tiny_card(write_card, schedule: str = "cost", **decoding):
    return write_card({"description": "t", "target": f"random:{LLAMA}", "device": "cpu", "dtype": "bfloat16",
                       "draft": {"kind": "early-exit", "layers": 2, "schedule": schedule},
                       "decoding": {"k": 3, "max_tokens": 16, **decoding}})


def test_verify_exactness_bitwise_in_bfloat16(run, write_card, one_thread):
    """Speculative == greedy, bitwise, with rounds that draft and accept: a fixed schedule, since
    the cost schedule's choice follows timings (on a busy machine it once drafted nothing)."""
    card = tiny_card(write_card, schedule="fixed")
    r = run("verify-exactness", "-c", card, "--bitwise", "--json", "-k", "1,3", "ab cd", "x y z")
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 4 and all(c["shapes"] == "pinned" and c["identical"] and c["bitwise"] for c in checks)
    assert all(c["drafted"] > 0 and c["accepted"] > 0 for c in checks), checks  # spec == greedy, not trivially
    assert "4/4 identical (pinned shapes), 4/4 bitwise-equal logits" in r.stderr
    batched = run("verify-exactness", "-c", card, "--bitwise", "--json", "-k", "3", "--batch", "2",
                  "ab cd", "x y z", "a much longer prompt than the others")
    assert batched.exit_code == 0, batched.stderr
    checks = parse_json_lines(batched.stdout)
    assert [(c["identical"], c["bitwise"]) for c in checks] == [(True, True)] * 3
    assert all(c["drafted"] > 0 and c["accepted"] > 0 for c in checks), checks


@pytest.mark.skipif(not kernels.bf16_kernels(), reason="this CPU has no oneDNN bfloat16 kernels (AVX-512 BF16 or AMX)")
def test_prepacked_bfloat16_stays_bitwise_under_pinned_shapes(run, write_card, one_thread):
    """oneDNN's prepacked weights in bfloat16 (matmuls: packed, every forward in that form, the
    plain weights freed): speculative == greedy bitwise, logits too, at batch 1 and 2."""
    card = tiny_card(write_card, schedule="fixed", matmuls="packed")
    r = run("verify-exactness", "-c", card, "--bitwise", "--json", "-k", "1,3", "ab cd", "x y z")
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 4 and all(c["shapes"] == "pinned" and c["identical"] and c["bitwise"] for c in checks)
    assert all(c["drafted"] > 0 and c["accepted"] > 0 for c in checks), checks
    batched = run("verify-exactness", "-c", card, "--bitwise", "--json", "-k", "3", "--batch", "2",
                  "ab cd", "x y z", "a much longer prompt than the others")
    assert batched.exit_code == 0, batched.stderr
    assert [(c["identical"], c["bitwise"]) for c in parse_json_lines(batched.stdout)] == [(True, True)] * 3
    from specdec_cli.pair.loading import load_pair

    pair = load_pair(load_card(str(card)))
    assert pair.dtype == torch.bfloat16 and pair.target.forms.whole and pair.policy.form(1, 4) == "packed"
    assert {p.dtype for p in pair.target.forms.packs.values()} == {torch.bfloat16}


def test_shapes_default_and_json(run, write_card, one_thread):
    """auto: pinned in bfloat16, free in float32 on a CPU; the JSON says which ran."""
    for dtype, shapes in (("bfloat16", "pinned"), ("float32", "free")):
        r = run("generate", "-c", tiny_card(write_card), "--dtype", dtype, "--json", "hello")
        assert r.exit_code == 0, r.stderr
        out = parse_json_lines(r.stdout)[0]
        assert out["shapes"] == shapes and out["forward_policy"]["shapes"] == shapes and out["identical"]
    r = run("generate", "-c", tiny_card(write_card, shapes="pinned"), "--dtype", "float32", "--json", "hello")
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["shapes"] == "pinned" and out["identical"] and out["spec"]["metrics"]["drafted"] > 0


@pytest.mark.parametrize("where", ["card", "option"])
def test_an_unknown_shapes_value_is_one_error_line(run, write_card, where):
    card = tiny_card(write_card, **({"shapes": "tight"} if where == "card" else {}))
    r = run("generate", "-c", card, *(["--shapes", "tight"] if where == "option" else []), "hello")
    assert r.exit_code == 2 and r.stdout == ""
    field = f"{card}: decoding.shapes" if where == "card" else "command line: --shapes"
    assert r.stderr.strip() == f"Error: {field}: must be one of auto, pinned, free, got 'tight'"


def test_pinned_where_the_loop_cannot_own_the_cache_names_the_model_and_why(write_card, monkeypatch):
    card = load_card(str(tiny_card(write_card, shapes="pinned")))
    from specdec_cli.engine.models import load, parse_ref

    target, _ = load(parse_ref(card.target, card.folder), torch.device("cpu"), torch.bfloat16)
    monkeypatch.setattr(target.model.config, "_attn_implementation", "flash_attention_2")
    with pytest.raises(SpecdecError) as e:
        forward_policy(card, target, torch.bfloat16)
    assert str(e.value) == (f"{card.path}: decoding.shapes: pinned needs the KV cache specdec owns, but target "
                            f"{card.target}: attention 'flash_attention_2' takes no per-row mask here (specdec's KV "
                            "cache runs sdpa or eager attention); use shapes: free")
    auto = load_card(str(tiny_card(write_card)))  # shapes: auto falls back to free there
    assert forward_policy(auto, target, torch.bfloat16).shapes == "free"


def test_bench_in_pinned_shapes_times_both_greedy_runs_and_says_which_it_beat(run, write_card, one_thread):
    """The honest speedup: pinned greedy (the exactness reference) and free-shape greedy (what a
    user would otherwise run) are both timed; the speedup is against the faster, named."""
    r = run("bench", "-c", tiny_card(write_card), "--prompts-file", "-", "--repeats", "1", "--json", "--k-sweep", "2,3",
            input='{"id": "a", "prompt": "ab cd ef"}\n{"id": "b", "prompt": "x y"}\n')
    assert r.exit_code == 0, r.stderr
    rows = [x for x in parse_json_lines(r.stdout) if x.get("row") == "bench"]
    assert rows and all(x["shapes"] == "pinned" and x["identical"] for x in rows)
    for x in rows:
        assert x["pinned_greedy_wall_s"] > 0 and x["free_greedy_wall_s"] > 0
        assert x["greedy_wall_s"] == min(x["pinned_greedy_wall_s"], x["free_greedy_wall_s"])
        assert x["baseline"] == ("pinned greedy" if x["pinned_greedy_wall_s"] < x["free_greedy_wall_s"] else "free greedy")


def test_synthetic_draft_rows_of_a_batch_read_their_own_reference(run, write_card, one_thread):
    """Each batch row's copy of the synthetic draft asks its own request's greedy reference (the
    copy used to call back into the original, which no row had begun)."""
    r = run("verify-exactness", "-c", tiny_card(write_card), "-d", "synthetic:agree=0.7", "--batch", "2", "--bitwise",
            "--json", "-k", "3", "ab cd", "x y z")
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert [(c["draft"], c["identical"], c["bitwise"]) for c in checks] == [("synthetic(agree=0.7)+cost", True, True)] * 2
    assert all(c["drafted"] > 0 and c["accepted"] > 0 for c in checks), checks


class Forced:
    """A verifier that emits the given tokens, one per round, whatever the target says: the
    loop teacher-forced, each position decoded alone (a greedy step's forward)."""

    def __init__(self, tokens: list[int]):
        self.tokens, self.at = tokens, 0

    def propose(self, draft, tokens: list[int], d: int, trees: bool = False):
        return Proposal(draft.propose(tokens, d))

    def verify(self, logits: torch.Tensor, proposal: Proposal):
        self.at += 1
        return torch.tensor(0), torch.tensor(self.tokens[self.at - 1 : self.at]), torch.arange(proposal.d + 1)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("width", [5, None], ids=["pinned", "free"])
def test_pinned_sampling_scores_each_position_as_a_lone_step_would(models, width, dtype):
    """Speculative sampling (a noisy twin drafting, rounds accepting and rejecting): the target's
    logits at every emitted position must be bitwise the ones the same tokens get one position per
    forward. Pinned shapes promise it; free shapes (a (d+1)-token verify against 1-token steps)
    break it, so the check can fail. And the same seed draws the same tokens again."""
    from specdec_cli.loop.decoding import decode
    from specdec_cli.loop.sampling import Sampler, Sampling

    target, draft = models["qwen2", dtype]
    prompt, warp = list(range(3, 15)), Sampling(0.9, 0, 0.95)

    def sampled():
        return decode(target, ModelDraft(draft, 512), prompt, 4, 40, NO_EOS, Sampler(warp, torch.Generator().manual_seed(7)),
                      width=width, trace=True)

    spec = sampled()
    assert any(r.accepted < r.drafted for r in spec.rounds) and any(r.accepted == r.drafted for r in spec.rounds)
    alone = decode(target, NoDraft(target.device), prompt, 0, 40, NO_EOS, Forced(spec.tokens), width=width, trace=True)
    assert alone.tokens == spec.tokens and len(spec.tokens) == 40
    assert logit_rows(alone.logits, spec.logits)["bitwise"] == (width is not None)
    assert sampled().tokens == spec.tokens


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory):
    """The Llama twin on disk: a target whose distribution is far from uniform."""
    return twin_checkpoints(tmp_path_factory.mktemp("llama"), *TWINS["llama"])[0]


@pytest.mark.parametrize("target", ["toy", "llama"])
def test_pinned_sampling_passes_the_statistical_test(run, write_card, llama_checkpoint, target, one_thread):
    """The toy (its logits do not depend on the forward's shape; tested against its exact
    distribution) and a real tiny Llama in bfloat16, where they do (against as many plain-sampling
    draws; an early-exit draft far enough from it that a broken accept rule shows)."""
    card = "toy" if target == "toy" else write_card(
        {"description": "t", "target": str(llama_checkpoint), "device": "cpu", "dtype": "bfloat16",
         "draft": {"kind": "early-exit", "layers": 1, "schedule": "fixed"}, "decoding": {"k": 3, "max_tokens": 16}})
    prompt = "ba be" if target == "toy" else "w40 w41 w42"
    r = run("verify-exactness", "-c", card, "--shapes", "pinned", "--temperature", "0.8" if target == "toy" else "1.0",
            "--samples", "300" if target == "toy" else "200", "-k", "3", "--json", prompt)
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert [c["passed"] for c in checks] == [True, True] and all(0 < c["accept_rate"] < 1 for c in checks), checks
    assert checks[0]["reference"] == ("exact" if target == "toy" else "plain")
    assert "2/2 tests pass" in r.stderr
