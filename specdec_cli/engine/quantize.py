"""int8 layers: a draft's dynamically quantized ones (quantize_int8: approximate, which costs
acceptance, never exactness), and a target's with every row scaled alone (quantize_target_int8,
`quantize: int8`: the int8 model is then the one speculation is exact against)."""

from __future__ import annotations

import warnings

import torch

from specdec_cli.errors import SpecdecError


def quantize_int8(lm):
    """`lm` with its nn.Linear layers (the LM head included) replaced, in place, by dynamically
    quantized int8 layers: int8 weights with one scale per output row, activations quantized on
    each call. A decode step then reads about half the weight bytes of float32 and uses the
    CPU's int8 dot products: faster, and approximate, so only for a draft (the target verifies
    every token in its own dtype). A tied embedding stays float (a lookup, not a matmul).
    CPU only; `lm` must be float32.

    The MLP's down projection stays float32: its input, act(gate) * up, has the outlier channels
    that one int8 scale per call rounds away. On Qwen2.5-Coder-0.5B drafting for the 1.5B,
    quantizing it too cut agreement on code from 0.92 to 0.86 for a step 0.10 instead of 0.16
    target steps (README, Cards)."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        raise SpecdecError(f"int8 needs torch.ao.quantization.quantize_dynamic, gone from torch {torch.__version__}") from None
    layers = {name: per_channel_dynamic_qconfig for name, module in lm.model.named_modules()
              if isinstance(module, torch.nn.Linear) and not name.endswith(KEEP_FLOAT)}
    with warnings.catch_warnings():  # deprecated (moving to torchao), still working in torch 2.13
        warnings.simplefilter("ignore")
        quantize_dynamic(lm.model, layers, dtype=torch.qint8, inplace=True)
    return lm


KEEP_FLOAT = ("down_proj",)  # quantize_int8 leaves these layers float (Llama, Qwen, Mistral, Gemma naming)


class RowInt8Linear(torch.nn.Module):
    """A target's linear layer in int8 whose every output row depends on its own input row only,
    bitwise, whatever the forward's width: weights int8 with one scale per output channel
    (fbgemm, prepacked), each input row scaled by its own absmax to [-127, 127] and rounded, the
    products summed in int32 (exact, so in any order), then scaled back per element. The weights
    stream a quarter of float32's bytes, and a forward of 8 tokens costs about what one does.
    (torch's dynamic int8 takes one scale per call, over every row: rows would change each
    other's rounding.) `weight` is the float weight only where `keep` (the LM head: a tied
    embedding or a features draft reads it), else None: one int8 copy."""

    OP = "linear_with_input_q_dq_qweight_dq_output_fp32"  # quantized::, fbgemm: float in, int8 x int8 -> int32, float out

    def __init__(self, layer: torch.nn.Linear, keep: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        w = layer.weight.detach().float()
        scale = (w.abs().amax(1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        with warnings.catch_warnings():  # quantized tensors are deprecated (moving to torchao), still working in torch 2.13
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(w, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(q, None)
        self.bias = None if layer.bias is None else torch.nn.Parameter(layer.bias.detach().float(), requires_grad=False)
        self.weight = layer.weight if keep else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        step = x.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny) / 127  # each row's own scale
        y = getattr(torch.ops.quantized, self.OP)(x / step, 1.0, 128, self.packed) * step
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def quantize_target_int8(model: torch.nn.Module) -> int:
    """A float32 target's linear layers, the LM head included, as RowInt8Linear, in place
    (`quantize: int8`): exact speculation against this int8 model (under pinned shapes: the
    attention stays float), at int8's speed. Returns the layers replaced. CPU only (fbgemm).
    (The down projection's outlier channels, which quantize_int8 keeps float for a draft, cost
    little here: each row has its own scale. SmolLM2-135M's greedy text stays on the float
    model's for 4-27 tokens on six prompts, then goes its own, as fluent, way: docs/kernels.md.)"""
    if not hasattr(torch.ops.quantized, RowInt8Linear.OP):
        raise SpecdecError(f"int8 needs torch.ops.quantized.{RowInt8Linear.OP}, not in torch {torch.__version__}")
    head = model.get_output_embeddings()
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, RowInt8Linear(child, keep=child is head))
                replaced += 1
    return replaced
