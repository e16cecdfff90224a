"""The README's claim: on CUDA a round's only host sync is its one `.tolist()`.

Run on a GPU machine (`pytest -m gpu`); skipped without CUDA. torch's sync debug mode warns on
every synchronizing CUDA call; a decode of R rounds may make R of them (one per round) plus
one for the request's final timing synchronize. Anything more is a sync we promised away.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from specdec_cli.loop.decoding import decode, greedy_decode
from specdec_cli.drafts import ModelDraft, PromptLookupDraft
from specdec_cli.engine.models import HFLM
from specdec_cli.loop.sampling import Sampler, Sampling

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CONFIG = Path(__file__).parent.parent / "cards" / "configs" / "tiny-llama.json"


def tiny(seed: int) -> HFLM:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(**json.loads(CONFIG.read_text()))
    return HFLM(AutoModelForCausalLM.from_config(config, dtype=torch.float32).to("cuda"))


def syncs(run) -> tuple[object, int]:
    """(run(), number of synchronizing CUDA calls it made)."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return out, sum("synchroniz" in str(w.message) for w in caught)


@pytest.mark.parametrize("draft_kind", ["model", "prompt-lookup"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampling"])
def test_one_sync_per_round(draft_kind, sampled):
    target = tiny(0)
    prompt = list(range(3, 40))
    draft = ModelDraft(tiny(1), target.vocab_size) if draft_kind == "model" else PromptLookupDraft(target.device)
    verifier = Sampler(Sampling(0.9, 0, 0.95), torch.Generator("cuda").manual_seed(0)) if sampled else None
    decode(target, draft, prompt, 4, 8, frozenset(), *([verifier] if verifier else []))  # warm-up (allocator, kernels)
    result, count = syncs(lambda: decode(target, draft, prompt, 4, 40, frozenset(), *([verifier] if verifier else [])))
    rounds = result.stats.verify_rounds
    assert any(r.drafted for r in result.rounds) or draft_kind == "prompt-lookup"
    assert count <= rounds + 1, f"{count} synchronizing calls for {rounds} rounds"


def test_plain_greedy_one_sync_per_token():
    target = tiny(0)
    greedy_decode(target, [5, 6, 7], 4, frozenset())
    result, count = syncs(lambda: greedy_decode(target, [5, 6, 7], 30, frozenset()))
    assert count <= len(result.tokens) + 1
