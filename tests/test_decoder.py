"""The decode forward without transformers' framework (engine/decoder.py): bitwise transformers'
logits, hidden states and K/V through the same KV buffers (Llama and Qwen2 layers, float32 and
bfloat16, free and pinned shapes, rows at different lengths, token trees, every matmul form),
and transformers' forward wherever it cannot run."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from specdec_cli.engine import decoder as decoder_module, kernels
from specdec_cli.engine.kvcache import KVCache
from specdec_cli.engine.models import HFLM
from specdec_cli.engine.taps import FINAL

SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=300, max_position_embeddings=256, initializer_range=0.3)


def tiny(model_type: str, dtype=torch.float32, attention: str = "sdpa", **extra) -> HFLM:
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **SHAPE, **extra)
    config._attn_implementation = attention
    return HFLM(AutoModelForCausalLM.from_config(config).to(dtype).eval())


def forwards(lm: HFLM, decoder: bool, width: int | None, rows: int, trees: bool):
    """Every output of one scripted run (prefills at three lengths, chains of 1..4 tokens with
    partial keeps, a tree round) through a KVCache using the decoder or transformers' forward."""
    cache = KVCache(lm, rows=rows, width=width, capacity=64 if width else None, decoder=decoder)
    for row in range(rows):
        cache.add(list(range(5 + 4 * row, 12 + 7 * row)))
    outs = []
    g = torch.Generator().manual_seed(1)
    for n, kept in ((1, 1), (4, 2), (3, 3), (2, 1)):
        taps = (FINAL,) if n % 2 else (1, 3, FINAL)  # the final hidden state alone, or fused with layers 1 and 3
        logits, hidden = cache.forward(torch.randint(0, 300, (rows, n), generator=g), features=taps)
        assert hidden.shape[-1] == 64 * len(taps)
        outs += [logits, hidden]
        cache.keep([kept] * rows)
    if trees:
        ids = torch.randint(0, 300, (rows, 5), generator=g)
        outs.append(cache.forward(ids, trees=[[0, 0, 1, 2]] * rows))
        cache.keep([3] * rows, paths=[[0, 2, 4]] * rows)
    outs += [t for layer in cache.cache.layers for t in (layer.keys, layer.values)]
    return outs


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("width", [None, 6], ids=["free", "pinned"])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_decoder_gives_transformers_outputs_bitwise(model_type, dtype, width, rows, one_thread):
    lm = tiny(model_type, dtype)
    assert lm.decoder is not None
    trees = rows == 1 or width is None
    assert same(forwards(lm, True, width, rows, trees), forwards(lm, False, width, rows, trees))


@pytest.mark.parametrize("forms", ["weight_major", "packed"])
def test_the_decoder_computes_in_the_matmul_form_the_policy_chose(forms, one_thread):
    """The form is asked once per forward (kernels.form_of), as each SwitchedLinear would ask."""
    lm = tiny("llama")
    assert lm.decoder is not None  # built before the layers are switched: configure builds it again
    lm.configure("free", "measure")
    lm.forms.use([1, 2, 3, 4], []) if forms == "weight_major" else lm.forms.use([], [1, 2, 3, 4])
    assert same(forwards(lm, True, None, 1, True), forwards(lm, False, None, 1, True))
    asked = []
    real = decoder_module.kernels.form_of
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoder_module.kernels, "form_of", lambda s, x: asked.append(real(s, x)) or real(s, x))
        forwards(lm, True, None, 1, False)
    assert set(asked) == {getattr(decoder_module.kernels, forms)} if forms == "packed" else \
        decoder_module.kernels.weight_major in asked


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_packed_world_computes_the_layers_that_read_one_input_as_one_product(model_type, one_thread):
    """q/k/v and gate/up (fused.FUSED) are one prepacked weight each (Qwen2's q/k/v with their
    biases): each part equals its own layer's product up to rounding, transformers' forward and
    the decoder both make one call per group (transformers' through the parts), bitwise alike."""
    lm, plain = tiny(model_type), tiny(model_type)
    lm.configure("free", "packed")
    groups = [m.group for m in lm.model.modules() if type(m) is kernels.SwitchedLinear and m.index == 0 and m.group]
    assert [len(g.layers) for g in groups] == [3, 2] * 3 and set(groups) <= set(lm.forms.packs)
    names = {id(m): name for name, m in lm.model.named_modules()}
    x = torch.randn(2, 5, 64)
    for group in groups:
        for layer, out in zip(group.layers, group.split(x)):
            reference = plain.model.get_submodule(names[id(layer)])(x)
            assert out.shape == reference.shape and torch.allclose(out, reference, atol=1e-5, rtol=1e-5)
    made = []
    real = kernels.PackedGroup.forward
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels.PackedGroup, "forward", lambda group, x: made.append(group) or real(group, x))
        for decoder in (True, False):
            made.clear()
            cache = KVCache(lm, decoder=decoder)
            cache.add(list(range(5, 12)))
            cache.forward(torch.tensor([[3, 4, 5]]))
            assert made[-6:] == groups  # the last forward: each group once, in order
    assert same(forwards(lm, True, 6, 1, True), forwards(lm, False, 6, 1, True))


@pytest.mark.parametrize("model_type, extra, why", [
    ("mistral", {"sliding_window": 8}, "MistralForCausalLM is not one of"),
    ("llama", {"hidden_act": "gelu"}, "activation 'gelu'"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}, "sliding-window layers"),
])
def test_other_models_keep_transformers_forward(model_type, extra, why):
    lm = tiny(model_type, **extra)
    assert why in decoder_module.unsupported(lm.model) and lm.decoder is None


def test_eager_attention_and_torch_s_dynamic_int8_keep_transformers_forward():
    assert "attention 'eager'" in decoder_module.unsupported(tiny("llama", attention="eager").model)
    lm = tiny("llama")
    torch.ao.quantization.quantize_dynamic(lm.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)  # torch's own
    assert "quantized" in decoder_module.unsupported(lm.model) and lm.decoder is None


def test_a_compiled_target_compiles_the_decoder_where_it_runs_else_transformers_forward(monkeypatch):
    given = []
    monkeypatch.setattr(kernels, "compiled", lambda forward: given.append(forward) or ("compiled", forward))
    lm = tiny("llama")
    eager = lm.decoder
    lm.configure("free", compile=True)
    assert given == [eager] and lm.decoder == ("compiled", eager) and lm.compiled
    lm = tiny("llama", attention="eager")
    lm.configure("free", compile=True)
    assert given[-1] is lm.model and lm.decoder is None and lm.compiled
