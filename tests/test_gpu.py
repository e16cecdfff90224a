"""GPU checks: run on a machine with CUDA (`pytest -m gpu`); skipped elsewhere.

On CUDA every decode forward is pinned (`shapes: auto` picks pinned on any GPU, docs/shapes.md),
and pinned shapes promise speculative == greedy at the same width bitwise: the same tokens and
the same logits at every emitted position, in float32 and in bfloat16. So these tests forgive
nothing, near-ties included: a divergence anywhere fails. Toy and `random:` models, no downloads.
"""

from __future__ import annotations

import json

import pytest
import torch

from specdec_cli.drafts import ModelDraft, PromptLookupDraft
from specdec_cli.engine.models import early_exit, load, parse_ref
from specdec_cli.eval.verify import logit_rows
from specdec_cli.loop.decoding import greedy_decode, speculative_decode

from .conftest import DATA, parse_json_lines

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CUDA = torch.device("cuda")
LLAMA_1B = DATA.parent.parent / "cards" / "configs" / "llama-1b.json"
NO_EOS = frozenset()
N = 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("config", [LLAMA_1B, DATA / "tiny-mistral-swa.json"], ids=["llama-1b", "mistral-swa"])
def test_pinned_spec_equals_greedy_bitwise_on_cuda(config, dtype):
    target, tok = load(parse_ref(f"random:{config}", DATA), CUDA, dtype)
    assert target.device.type == "cuda" and target.model.dtype == dtype
    prompt = tok.encode("The quick brown fox jumps over the lazy dog. " * 4)
    layers = len(target.model.get_decoder().layers)
    same, _ = load(parse_ref(f"random:{config}", DATA), CUDA, dtype)  # identical weights: a draft that agrees
    drafts = {"early-exit": ModelDraft(early_exit(target, layers // 2), target.vocab_size),
              "prompt-lookup": PromptLookupDraft(CUDA), "same weights": ModelDraft(same, target.vocab_size)}
    for k in (1, 4, 8):
        greedy = greedy_decode(target, prompt, N, NO_EOS, width=k + 1, trace=True)
        for name, draft in drafts.items():
            what = (config.name, dtype, k, name)
            spec = speculative_decode(target, draft, prompt, k, N, NO_EOS, width=k + 1, trace=True)
            assert spec.tokens == greedy.tokens, what
            assert logit_rows(greedy.logits, spec.logits) == {"bitwise": True, "logit_rows": N,
                                                              "bitwise_divergence": None}, what
            assert spec.stats.drafted > 0, what  # spec == greedy because it was checked, not because nothing was drafted
            if name == "same weights":  # it proposes in free shapes, so a near-tie may reject; a stale cache would reject most
                assert spec.stats.accept_rate > 0.5, (what, spec.stats.accept_rate)


def test_device_auto_picks_cuda_pinned_and_is_exact(run):
    obj = json.loads(run("generate", "-c", "toy", "--device", "auto", "--json", "ba be bi").stdout)
    assert obj["identical"] is True
    r = run("generate", "-c", "random-llama-1b", "--device", "auto", "-n", "32", "--json", "hello")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["device"].startswith("cuda") and obj["dtype"] == "bfloat16" and obj["shapes"] == "pinned", obj
    assert obj["identical"] is True and obj["spec"]["metrics"]["drafted"] > 0, r.stderr


def test_verify_exactness_on_cuda_is_bitwise(run):
    r = run("verify-exactness", "-c", "random-llama-1b", "--device", "auto", "--bitwise", "-n", "32", "-k", "1,4",
            "--json", "hello", "The quick brown fox jumps over the lazy dog.")
    assert r.exit_code == 0, r.stderr
    checks = parse_json_lines(r.stdout)
    assert len(checks) == 4, checks
    assert all(c["shapes"] == "pinned" and c["identical"] and c["bitwise"] and c["drafted"] > 0 for c in checks), checks
    assert "4/4 identical (pinned shapes), 4/4 bitwise-equal logits" in r.stderr
