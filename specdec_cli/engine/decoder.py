"""A decode forward for Llama-family targets over the KV buffers the loop owns, without the
framework around the math.

transformers' forward spends a third of a SmolLM2 step on a CPU outside the matmuls: per-call
mask building, keyword plumbing, output records, a registry lookup per layer. `Decoder` runs the
same torch ops in the same order as `LlamaForCausalLM` / `Qwen2ForCausalLM` (the model's own
modules for the norms' weights, the linear layers, so the matmul forms of kernels.py still apply,
and the rotary table; looked up once, so HFLM builds it again after any module surgery), so its
logits are bitwise transformers' (tests/test_decoder.py); it takes the mask, positions and write
columns KVCache made for the forward, and attends with the same grouped sdpa (attention.py).
Anything else (another architecture, a GPU, eager attention, sliding-window layers) keeps
transformers' forward: `unsupported` says why. Under decoding.compile it is this forward that is
compiled (kernels.compiled).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_cli.engine import attention, kernels
from specdec_cli.engine.attention import Detour
from specdec_cli.engine.quantize import RowInt8Fused, RowInt8Linear, RowInt8Part
from specdec_cli.engine.taps import FINAL

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # the same layer, Qwen2's q/k/v with a bias


def unsupported(model) -> str | None:
    """Why `Decoder` cannot run this model's decode forwards (None: it can)."""
    name = type(model).__name__
    if name not in ARCHITECTURES:
        return f"{name} is not one of {', '.join(ARCHITECTURES)}"
    config = model.config
    if config._attn_implementation != "sdpa":
        return f"attention {config._attn_implementation!r} (the decoder runs sdpa)"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (the decoder runs silu)"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "sliding-window layers"
    if model.get_input_embeddings().weight.device.type != "cpu":
        return "a GPU (its fused sdpa takes grouped heads its own way)"
    odd = {f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules() if isinstance(m, torch.nn.Module) and hasattr(m, "in_features")
           and type(m) not in (torch.nn.Linear, kernels.SwitchedLinear, RowInt8Linear, RowInt8Fused, RowInt8Part)}
    if odd:
        return f"{', '.join(sorted(odd))} layers (the decoder computes plain, switched and row-int8 linear layers)"
    return None


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm.forward, bitwise: torch's rms_norm runs its ops in C++ (to float32, pow,
    mean, add eps, rsqrt, mul, back to x's dtype), the weight multiplied after, as Llama does."""
    return weight * torch.rms_norm(x, (x.shape[-1],), None, eps)


def _rotary(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(cos, sin with its first half negated, half): x * cos + rotate_half(x) * sin is then
    x * cos + x.roll(half) * that sin, bitwise (a negation is exact), in two ops fewer per tensor."""
    half = sin.shape[-1] // 2
    return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1), half


def _mm(linear, layer, x: torch.Tensor) -> torch.Tensor:
    """x through `layer`: the forward's matmul form (kernels.form_of), or an int8 layer's own."""
    return layer.forward(x) if type(layer) in (RowInt8Linear, RowInt8Part) else linear(layer, x)


def _group(layers: tuple) -> tuple | RowInt8Fused | kernels.PackedGroup:
    """`layers` computed together (fused.FUSED): their RowInt8Fused where they are its parts, in
    order (one int8 matmul), their PackedGroup where they form one (one prepacked matmul in the
    packed world), else the layers, one call each."""
    fused = getattr(layers[0], "fused", None)
    if fused is not None and len(layers) == len(fused.sizes) and all(
            type(m) is RowInt8Part and m.fused is fused and m.i == i for i, m in enumerate(layers)):
        return fused
    group = getattr(layers[0], "group", None)
    return group if group is not None and group.layers == tuple(layers) else layers


def _one(linear, group: tuple | RowInt8Fused | kernels.PackedGroup) -> RowInt8Fused | kernels.PackedGroup | None:
    """The group as one product in this forward's form (int8 always, prepacked in the packed
    world), else None: its layers compute one by one."""
    one = type(group) is RowInt8Fused or type(group) is kernels.PackedGroup and linear is kernels.packed
    return group if one else None


def _each(linear, group: tuple | RowInt8Fused | kernels.PackedGroup, x: torch.Tensor) -> list[torch.Tensor]:
    """x through each layer of a group that is not one product here (_one)."""
    return [_mm(linear, m, x) for m in (group.layers if type(group) is kernels.PackedGroup else group)]


def _joined(linear, group: tuple | RowInt8Fused | kernels.PackedGroup, x: torch.Tensor) -> torch.Tensor:
    """x through every layer of a `_group`, the outputs side by side [..., sum of outputs]."""
    one = _one(linear, group)
    return one.forward(x) if one is not None else torch.cat(_each(linear, group, x), -1)


def _mms(linear, group: tuple | RowInt8Fused | kernels.PackedGroup, x: torch.Tensor) -> list[torch.Tensor]:
    """x through each layer of a `_group`."""
    one = _one(linear, group)
    return one.split(x) if one is not None else _each(linear, group, x)


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's parts, looked up once (a step would otherwise walk nn.Module
    attributes some 14 times a layer, about 1 ms of a SmolLM2 step)."""

    norm_in: torch.Tensor  # input_layernorm's weight
    qkv: tuple | RowInt8Fused | kernels.PackedGroup  # q, k, v projections (_group)
    o: torch.nn.Module
    norm_post: torch.Tensor  # post_attention_layernorm's weight
    gate_up: tuple | RowInt8Fused | kernels.PackedGroup
    down: torch.nn.Module

    @classmethod
    def of(cls, layer) -> _Layer:
        a, mlp = layer.self_attn, layer.mlp
        return cls(layer.input_layernorm.weight, _group((a.q_proj, a.k_proj, a.v_proj)), a.o_proj,
                   layer.post_attention_layernorm.weight, _group((mlp.gate_proj, mlp.up_proj)), mlp.down_proj)


class Decoder:
    """`model`'s decode forward over buffers: `__call__` (module doc)."""

    def __init__(self, model) -> None:
        self.model, body = model, model.model
        self.embed, self.rotary = body.embed_tokens, body.rotary_emb
        self.layers = [_Layer.of(layer) for layer in body.layers[: model.config.num_hidden_layers]]
        self.norm, self.eps, self.head = body.norm.weight, body.norm.variance_epsilon, model.lm_head
        first = body.layers[0].self_attn
        self.head_dim, self.scaling, self.groups = first.head_dim, first.scaling, first.num_key_value_groups

    def __call__(self, ids: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], at: torch.Tensor | int,
                 columns: int, visible: torch.Tensor, positions: torch.Tensor, detours: list[Detour] = (),
                 features: tuple[int, ...] = ()):
        """ids [B, S] -> logits [B, S, V] (with `features`, and the hidden states at those taps
        [B, S, T * H], taps.py).
        Layer i's new K/V are written into keys[i] / values[i] [rows, KV, capacity, D] at the
        columns `at` [B, 1, S, 1] (an int: every row at columns at .. at + S - 1, a slice
        written in one copy, where a scatter cost some 40 µs a layer); each query sees its first
        `columns` columns where `visible` [B, 1, S, columns] says; `positions` [B, S] are the
        rotary positions."""
        b, s = ids.shape
        x = self.embed(ids)
        rotary = _rotary(*(t.unsqueeze(2) for t in self.rotary(x, positions)))  # cos, sin [B, S, 1, D]
        g = self.groups
        # The mask grouped_attention makes once per forward, as sdpa turns a boolean one into scores
        # to add (0 or -inf) in every call: the same scores, made once.
        grouped = attention.grouped_mask(visible, g)
        mask = torch.zeros(grouped.shape, dtype=x.dtype).masked_fill_(~grouped, float("-inf"))
        if not isinstance(at, int):
            at = at.expand(b, keys[0].shape[1], s, self.head_dim)
        linear = kernels.form_of(self.head.switch if isinstance(self.head, kernels.SwitchedLinear)
                                 else None, x)  # the forward's matmul form, as each SwitchedLinear would ask
        detoured = attention.Detours.of(detours, columns, s, g) if detours else None  # the same for every layer
        kept = {}
        for n, (layer, k_buffer, v_buffer) in enumerate(zip(self.layers, keys, values), 1):
            h = self._attend(layer, linear, _norm(x, layer.norm_in, self.eps), k_buffer[:b],
                             v_buffer[:b], at, columns, mask, rotary, g, detoured)
            x = x + h
            h = _norm(x, layer.norm_post, self.eps)
            gate, up = _mms(linear, layer.gate_up, h)
            gated = torch.nn.functional.silu(gate) * up
            x = x + _mm(linear, layer.down, gated)
            if n in features:
                kept[n] = x
        kept[FINAL] = hidden = _norm(x, self.norm, self.eps)
        logits = _mm(linear, self.head, hidden)
        if not features:
            return logits
        return logits, torch.cat([kept[t] for t in features], dim=-1) if len(features) > 1 else kept[features[0]]

    def _attend(self, layer, linear, h, k_buffer, v_buffer, at, columns, mask, rotary, g, detoured):
        """LlamaAttention.forward with KVLayer.update and grouped_attention's sdpa inlined."""
        b, s, _ = h.shape
        qkv = _joined(linear, layer.qkv, h).view(b, s, -1, self.head_dim)  # [B, S, H + 2 KV, D]
        kv = k_buffer.shape[1]
        qk, v = qkv[:, :, : -kv], qkv[:, :, -kv:].transpose(1, 2)
        cos, sin, half = rotary  # q's and k's heads turned at once: the same ops, element by element
        qk = qk * cos + qk.roll(half, -1) * sin
        q, k = qk[:, :, : -kv].transpose(1, 2), qk[:, :, -kv:].transpose(1, 2)  # [B, H, S, D], [B, KV, S, D]
        if isinstance(at, int):
            k_buffer[:, :, at : at + s] = k
            v_buffer[:, :, at : at + s] = v
        else:
            k_buffer.scatter_(2, at, k)
            v_buffer.scatter_(2, at, v)
        key, value = k_buffer[:, :, :columns], v_buffer[:, :, :columns]
        out = attention.grouped_sdpa(q, key, value, mask, g, 0.0, self.scaling)  # [B, H, S, D]
        if detoured is not None:
            out = detoured.apply(out, q, key, value, 0.0, self.scaling)
        return _mm(linear, layer.o, out.transpose(1, 2).contiguous().reshape(b, s, -1).contiguous())
