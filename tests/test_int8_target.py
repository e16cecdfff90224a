"""An int8 target (`quantize: int8`, engine/quantize.py's RowInt8Linear): each output row bitwise
independent of the other rows and of the width, the int8 products summed exactly; the decoder
bitwise transformers' forward over int8 layers; and through the CLI, speculation equal to the
int8 model's own greedy decode, pinned, with its own cost profile."""

from __future__ import annotations

import pytest
import torch

from specdec_cli.engine.quantize import KERNELS, RowInt8Fused, RowInt8Linear, RowInt8Part, quantize_int8

from .conftest import parse_json_lines
from .test_decoder import forwards, same, tiny
from .test_kernels import tiny_card


def layer(out_features=96, in_features=64, bias=True) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(in_features, out_features, bias=bias)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("bias", [True, False])
def test_each_row_is_bitwise_its_own_whatever_the_width(bias, kernel):
    int8 = RowInt8Linear(layer(bias=bias), kernel=kernel)
    x = torch.randn(8, 64) * torch.logspace(-3, 2, 8)[:, None]  # rows of very different scales
    x[3, 5] = 300.0  # an outlier channel in one row only
    full = int8(x)
    assert all(torch.equal(int8(x[:m]), full[:m]) for m in range(1, 9))
    assert all(torch.equal(int8(x[i : i + 1])[0], full[i]) for i in range(8))
    assert torch.equal(int8(x[None])[0], full)  # [rows, n, in] as a forward gives it


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_int8_products_are_summed_exactly(kernel):
    """What the op returns is the exact integer sum of the rounded rows times the weights' int8
    values, scaled back (no int16 saturation on this CPU), to float32's rounding."""
    linear = layer(bias=False)
    int8 = RowInt8Linear(linear, kernel=kernel)
    x = torch.randn(5, 64)
    step = x.abs().amax(-1, keepdim=True) / 127
    w = linear.weight.detach()
    scale = w.abs().amax(1) / 127
    exact = (torch.round(x / step).double() @ torch.round(w / scale[:, None]).double().t()) * scale.double() * step.double()
    assert torch.allclose(int8(x).double(), exact, rtol=1e-5, atol=1e-6)
    assert (int8(x) - x @ w.t()).abs().max() < 0.05 * (x @ w.t()).abs().max()  # and close to the float layer


def test_both_kernels_give_the_same_bits():
    """oneDNN and fbgemm sum the same int8 values exactly: which one runs is a matter of speed."""
    x = torch.randn(8, 64) * torch.logspace(-3, 2, 8)[:, None]
    onednn, fbgemm = (RowInt8Linear(layer(), kernel=k) for k in ("onednn", "fbgemm"))
    assert all(torch.equal(onednn(x[:m]), fbgemm(x[:m])) for m in (1, 2, 5, 8))
    lm, other = tiny("qwen2"), tiny("qwen2")
    quantize_int8(lm.model, kernel="onednn")
    quantize_int8(other.model, kernel="fbgemm")
    ids = torch.tensor([list(range(3, 15))])
    with torch.inference_mode():
        assert torch.equal(lm.model(ids).logits, other.model(ids).logits)


def test_every_linear_layer_goes_int8_and_the_head_keeps_its_weight():
    lm = tiny("llama")
    head_weight = lm.model.get_output_embeddings().weight
    assert quantize_int8(lm.model) == 3 * 7 + 1
    assert not any(type(m) is torch.nn.Linear for m in lm.model.modules())
    assert lm.model.get_output_embeddings().weight is head_weight  # a features draft reads it
    assert lm.model.model.layers[0].mlp.down_proj.weight is None  # one copy: the int8 one


@pytest.mark.parametrize("tied", [True, False])
def test_a_draft_s_head_drops_its_float_weight_unless_it_is_the_embedding(tied):
    lm = tiny("llama", tie_word_embeddings=tied)
    embedding = lm.model.get_input_embeddings().weight
    quantize_int8(lm.model, head_weight=False)  # a model draft's: only its logits are read
    head = lm.model.get_output_embeddings()
    assert type(head) is RowInt8Linear and (head.weight is embedding if tied else head.weight is None)
    assert lm.model.get_input_embeddings().weight is embedding


@pytest.mark.parametrize("biases", [(True, True, True), (False, False, False), (True, False, True)])
def test_a_fused_layer_is_bitwise_its_separate_layers(biases):
    """One int8 matmul for layers of one input (q/k/v, gate/up): the same outputs, bit for bit,
    as each layer alone, at every width; its parts, called on one input as transformers' forward
    calls them, share one product and let it go once each has taken its own."""
    layers = [layer(out, 64, bias) for out, bias in zip((96, 32, 48), biases)]
    for i, m in enumerate(layers):  # different weights, and scales, per layer
        m.weight.data *= 10.0 ** (i - 1)
    fused, alone = RowInt8Fused(layers), [RowInt8Linear(m) for m in layers]
    x = torch.randn(8, 64) * torch.logspace(-3, 2, 8)[:, None]
    for m in (1, 3, 8):
        assert all(torch.equal(a, b) for a, b in zip(fused.split(x[:m]), [y(x[:m]) for y in alone]))
    parts = [RowInt8Part(fused, i) for i in range(3)]
    q, k = parts[0](x), parts[1](x)
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()  # one product
    assert torch.equal(parts[2](x), alone[2](x)) and fused._last is None  # each part taken: let go
    k = parts[1](x)
    other = parts[1](x.clone())  # another input (or a part asked twice): computed anew
    assert torch.equal(other, k) and other.untyped_storage().data_ptr() != k.untyped_storage().data_ptr()


def test_quantize_fuses_each_layer_s_projections_and_changes_no_bit():
    lm, separate = tiny("qwen2"), tiny("qwen2")  # q/k/v with biases
    quantize_int8(lm.model)
    for parent in list(separate.model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, RowInt8Linear(child))
    attention, mlp = lm.model.model.layers[0].self_attn, lm.model.model.layers[0].mlp
    assert {attention.q_proj.fused, attention.k_proj.fused, attention.v_proj.fused} == {attention.q_proj.fused}
    assert type(mlp.gate_proj) is RowInt8Part and mlp.gate_proj.fused is mlp.up_proj.fused
    assert type(attention.o_proj) is RowInt8Linear and type(mlp.down_proj) is RowInt8Linear
    ids = torch.tensor([list(range(3, 15))])
    with torch.inference_mode():
        assert torch.equal(lm.model(ids).logits, separate.model(ids).logits)


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_decoder_runs_int8_layers_bitwise_as_transformers_does(model_type, one_thread):
    lm = tiny(model_type)
    lm.quantize("int8")
    assert lm.decoder is not None and lm.quantized == "int8"
    assert same(forwards(lm, True, 6, 1, True), forwards(lm, False, 6, 1, True))


def test_an_int8_target_speculates_exactly_pinned(run, write_card, one_thread):
    card = tiny_card(write_card)
    r = run("generate", "-c", card, "--quantize", "int8", "-m", "both", "--json", "ab ab ab ab ab")
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["quantize"] == "int8" and out["shapes"] == "pinned" and out["identical"]
    assert out["spec"]["tokens"] == out["greedy"]["tokens"] and len(out["greedy"]["tokens"]) == 12
    assert out["cost_profile"]["cached"] is False  # its own profile, not the float model's
    r = run("generate", "-c", card, "-m", "both", "--json", "ab ab ab ab ab")
    assert parse_json_lines(r.stdout)[0]["cost_profile"]["cached"] is False
