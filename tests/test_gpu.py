"""GPU checks: run on a machine with CUDA (`pytest -m gpu`); skipped elsewhere.

Toy and `random:` models on CUDA, speculative == greedy in float32 and bfloat16, and
`--device auto` picking CUDA. No downloads needed.
"""

from __future__ import annotations

import json

import pytest
import torch

from specdec_cli.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, PromptLookupDraft
from specdec_cli.models import early_exit, load, parse_ref

from .conftest import DATA

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CUDA = torch.device("cuda")
LLAMA_1B = DATA.parent.parent / "cards" / "configs" / "llama-1b.json"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("config", [LLAMA_1B, DATA / "tiny-mistral-swa.json"], ids=["llama-1b", "mistral-swa"])
def test_spec_equals_greedy_on_cuda(config, dtype):
    target, tok = load(parse_ref(f"random:{config}", DATA), CUDA, dtype)
    assert target.device.type == "cuda" and target.model.dtype == dtype
    prompt = tok.encode("The quick brown fox jumps over the lazy dog. " * 4)
    greedy = greedy_decode(target, prompt, 64, frozenset())
    layers = len(target.model.get_decoder().layers)
    drafts = [ModelDraft(early_exit(target, layers // 2), target.vocab_size), PromptLookupDraft(CUDA)]
    for draft in drafts:
        for k in (1, 4, 8):
            spec = speculative_decode(target, draft, prompt, k, 64, frozenset())
            assert spec.tokens == greedy.tokens, (config.name, dtype, k, draft)
    same, _ = load(parse_ref(f"random:{config}", DATA), CUDA, dtype)  # identical weights: always agrees
    spec = speculative_decode(target, ModelDraft(same, target.vocab_size), prompt, 4, 64, frozenset())
    assert spec.tokens == greedy.tokens and spec.stats.accept_rate == 1.0


def test_device_auto_picks_cuda_and_toy_runs(run):
    obj = json.loads(run("generate", "-c", "toy", "--device", "auto", "--json", "ba be bi").stdout)
    assert obj["identical"] is True
    r = run("generate", "-c", "random-llama-1b", "--device", "auto", "-n", "32", "--json", "hello")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["device"].startswith("cuda") and obj["dtype"] == "bfloat16" and obj["identical"] is True
