"""A cheaper model draft: `draft.dtype` (its own dtype) and `draft.quantize: int8` (int8 linear
layers, engine/quantize.py, loaded and quantized before the target). The target still verifies
every token in its own dtype, so the output stays exactly the target's greedy output; only the
draft's agreement may change."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from specdec_cli.engine.quantize import RowInt8Linear

from specdec_cli.cards.card import load_card
from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.errors import SpecdecError
from specdec_cli.pair.loading import load_pair

from .test_errors import assert_one_error

TINY = Path(__file__).resolve().parents[1] / "cards/configs/tiny-llama.json"  # 4 layers, vocab 512, tied head
NO_EOS = frozenset()


def tiny_card(write_card, device="cpu", **draft):
    """Target and draft: the same random tiny Llama (same seed, same weights), so a float32
    draft agrees everywhere and a cheapened one almost everywhere."""
    return write_card({"description": "t", "target": f"random:{TINY}", "device": device,
                       "draft": {"kind": "model", "model": f"random:{TINY}", "schedule": "fixed", **draft}})


@pytest.mark.parametrize("draft, message", [
    ({"kind": "model", "model": "m", "dtype": "fp8"},
     "draft.dtype: must be one of auto, float32, bfloat16, float16, got 'fp8'"),
    ({"kind": "model", "model": "m", "quantize": "int4"}, "draft.quantize: must be one of none, int8, got 'int4'"),
    ({"kind": "model", "model": "m", "quantize": True}, "draft.quantize: must be one of none, int8, got True"),
    ({"kind": "prompt-lookup", "dtype": "bfloat16"}, "draft.dtype: not used by draft kind 'prompt-lookup', got 'bfloat16'"),
    ({"kind": "early-exit", "layers": 1, "quantize": "int8"},
     "draft.quantize: not used by draft kind 'early-exit', got 'int8'"),
    ({"kind": "model", "model": "m", "dtype": "bfloat16", "quantize": "int8"},
     "draft.dtype: must be auto or float32 with draft.quantize: int8 (int8 layers are quantized from float32), "
     "got 'bfloat16'"),
])
def test_bad_cheap_draft_fields_are_one_error_line(run, write_card, draft, message):
    path = write_card({"description": "t", "target": "toy", "draft": draft, "device": "cpu"})
    assert_one_error(run("generate", "-c", path, "ba"), f"{path}: {message}")


def test_int8_draft_off_the_cpu_is_refused_before_loading(write_card, monkeypatch):
    """int8 layers have CPU kernels only (fbgemm): a card whose device resolves to a GPU fails
    before the (slow) target load, naming the field."""
    import specdec_cli.engine.placement as placement
    import specdec_cli.pair.loading as pair_mod
    import specdec_cli.pair.targets as targets

    def no_load(*a, **kw):
        raise AssertionError("a model was loaded before the card was checked")

    monkeypatch.setattr(placement, "resolve_device", lambda name: torch.device("cuda"))  # as the model kind sees a GPU machine
    monkeypatch.setattr(pair_mod, "load", no_load)
    monkeypatch.setattr(targets, "load", no_load)
    card = load_card(str(tiny_card(write_card, device="auto", quantize="int8")))
    with pytest.raises(SpecdecError) as e:
        load_pair(card)
    assert str(e.value) == (f"{card.path}: draft.quantize: 'int8' runs on the CPU only (fbgemm's int8 layers), "
                            f"but device 'auto' is cuda")


@pytest.mark.parametrize("quantize", ["int8", "none"])
def test_an_int8_draft_is_loaded_and_quantized_before_the_target(write_card, monkeypatch, quantize):
    """Its float32 weights are gone before the target's are read, so the two are never held
    together (the Qwen pair's peak memory: docs/kernels.md); a float draft loads after."""
    import specdec_cli.pair.loading as pair_mod
    import specdec_cli.pair.targets as targets

    loaded, seen, load = [], [], pair_mod.load

    def recording(*args, **kwargs):
        held = [lm.quantized for lm in loaded]  # how the models loaded so far are held now
        lm, tokenizer = load(*args, **kwargs)
        loaded.append(lm)
        seen.append(held)
        return lm, tokenizer

    monkeypatch.setattr(pair_mod, "load", recording)  # the draft's load
    monkeypatch.setattr(targets, "load", recording)  # the target's
    pair = load_pair(load_card(str(tiny_card(write_card, quantize=quantize))))
    draft = pair.draft.lm
    assert loaded == ([draft, pair.target] if quantize == "int8" else [pair.target, draft])
    assert seen == ([[], ["int8"]] if quantize == "int8" else [[], ["none"]]) and not pair.early
    assert draft.quantized == quantize and pair.target.quantized == "none"
    kernels = {m.kernel for m in draft.model.modules() if isinstance(m, RowInt8Linear)}
    assert kernels == ({"fbgemm"} if quantize == "int8" else set())  # its steps are one token wide


@pytest.mark.parametrize("draft, dtype, label", [
    ({"dtype": "bfloat16"}, torch.bfloat16, "bfloat16"),
    ({"quantize": "int8"}, torch.float32, "int8"),
])
def test_cheap_draft_runs_cheap_and_spec_equals_greedy(write_card, one_thread, draft, dtype, label):
    pair = load_pair(load_card(str(tiny_card(write_card, **draft))))
    lm = pair.draft.lm
    assert pair.target.model.dtype == torch.float32  # the target verifies in its own dtype
    assert lm.model.dtype == dtype
    assert pair.draft.name == f"model(random:{TINY}, {label})"  # its own name: its own measured cost
    float_layers = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    int8_layers = [m for m in lm.model.modules() if isinstance(m, RowInt8Linear)]
    if draft.get("quantize"):  # every linear layer, the (tied) LM head too
        assert len(int8_layers) == 4 * 4 + 1 and isinstance(lm.model.get_output_embeddings(), RowInt8Linear)
        assert not float_layers
    else:
        assert len(float_layers) == 4 * 7 + 1 and not int8_layers
    prompt = list(range(3, 15))
    greedy = greedy_decode(pair.target, prompt, 40, NO_EOS).tokens
    for k in (1, 3, 5):
        spec = speculative_decode(pair.target, pair.draft, prompt, k, 40, NO_EOS)
        assert spec.tokens == greedy
        assert spec.stats.accept_rate > 0.5  # the cheap draft still drafts the target's tokens


def test_cheap_draft_samples_with_float32_q(write_card, one_thread):
    """Sampling: q over the shared vocabulary comes back in float32 from a bfloat16 draft."""
    pair = load_pair(load_card(str(tiny_card(write_card, dtype="bfloat16"))))
    sampling = replace(pair.card, temperature=0.8)
    pair.card = sampling
    draft = pair.draft
    draft.begin([3, 4, 5])
    tokens, q = draft.propose_sampled([3, 4, 5], 3, pair.sampling.warp, pair.generator())
    assert tokens.shape == (3,) and q.dtype == torch.float32 and q.shape == (3, pair.target.vocab_size)
    assert torch.allclose(q.sum(-1), torch.ones(3))
