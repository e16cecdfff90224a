"""int8 linear layers with every row scaled alone (RowInt8Linear): a target's (`quantize: int8`:
the int8 model is then the one speculation is exact against) and a draft model's
(`draft.quantize: int8`: cheaper proposals; the target verifies every token)."""

from __future__ import annotations

import warnings

import torch

from specdec_cli.engine.fused import Shared, groups
from specdec_cli.errors import SpecdecError


# torch's two int8 matmuls, kernel -> (torch.ops namespace, op); both sum the same int8 values exactly
OPS = {"onednn": ("onednn", "qlinear_pointwise"), "fbgemm": ("quantized", "linear_with_input_q_dq_qweight_dq_output_fp32")}
KERNELS = tuple(OPS)


class RowInt8Linear(torch.nn.Module):
    """A linear layer in int8 whose every output row depends on its own input row only, bitwise,
    whatever the forward's width: weights int8 with one scale per output channel (prepacked),
    each input row scaled by its own absmax to [-127, 127] and rounded, the products summed in
    int32 (exact, so in any order), then scaled back per element. The weights stream a quarter
    of float32's bytes. `kernel` (KERNELS) is the library that sums them, chosen by the widths
    the model runs (quantize_int8); both give the same outputs, bit for bit (tested).
    (torch's dynamic int8 takes one scale per call, over every row: rows would change each
    other's rounding; on the Qwen2.5-Coder-0.5B draft it also kept the down projections float,
    whose outlier channels one scale per call rounds away, and drafted 2.18 tokens a round at
    0.52 target steps where these layers draft 2.61 at 0.46: docs/kernels.md.) `weight` is the
    float weight only where `keep` (the LM head: a tied embedding or a features draft reads
    it), else None: one int8 copy."""

    def __init__(self, layer: torch.nn.Linear, keep: bool = False, kernel: str = "onednn") -> None:
        super().__init__()
        self.in_features, self.out_features, self.kernel = layer.in_features, layer.out_features, kernel
        self.op = _op(kernel)
        self.packed, self.scale = _packed(layer.weight.detach().float(), kernel)
        self.bias = None if layer.bias is None else torch.nn.Parameter(layer.bias.detach().float(), requires_grad=False)
        self.weight = layer.weight if keep else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        step = x.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny) / 127  # each row's own scale
        if self.kernel == "fbgemm":  # it rounds x / step itself (scale 1, as uint8 + 128)
            y = self.op(x / step, 1.0, 128, self.packed)
        else:
            rows = torch.round(x / step).to(torch.int8).reshape(-1, self.in_features)
            y = self.op(rows, 1.0, 0, self.packed, self.scale, _ZEROS, None, 1.0, 0, torch.float32, "none", [], "")
            y = y.reshape(*x.shape[:-1], self.out_features)
        y = y * step
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows, {self.kernel}"


def _op(kernel: str):
    """The kernel's int8 matmul (OPS); a torch without it is a SpecdecError."""
    space, name = OPS[kernel]
    if not hasattr(getattr(torch.ops, space), name):
        raise SpecdecError(f"int8 needs torch.ops.{space}.{name}, not in this torch {torch.__version__}")
    return getattr(getattr(torch.ops, space), name)


_ZEROS = torch.zeros(1, dtype=torch.long)  # the weights' zero points (symmetric: 0)


def _packed(w: torch.Tensor, kernel: str) -> tuple[object, torch.Tensor]:
    """A float32 weight [out, in] in int8, one scale per output channel: (the kernel's prepacked
    int8 weight, the scales). Both kernels pack the same int8 values."""
    scale = (w.abs().amax(1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = torch.round(w / scale[:, None]).to(torch.int8)
    if kernel == "onednn":
        return torch.ops.onednn.qlinear_prepack(q, None), scale
    with warnings.catch_warnings():  # quantized tensors are deprecated (moving to torchao), still working in torch 2.13
        warnings.simplefilter("ignore")
        q = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0)
        return torch.ops.quantized.linear_prepack(q, None), scale


class RowInt8Fused(Shared, RowInt8Linear):
    """Linear layers that read the same input (a layer's q/k/v, an MLP's gate/up) as one int8
    matmul: on a CPU, one call of 2048 output channels costs what one of 1536 does, and the input
    is scaled once. Bitwise the separate layers: the per-row input scale is the same, each output
    channel keeps its own weight scale, and the int32 sums are exact. `split` gives every part's
    output; the parts (RowInt8Part) stay in the model for transformers' forward (fused.Shared)."""

    def __init__(self, layers: list[torch.nn.Linear], kernel: str = "onednn") -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.sizes, self.kernel = layers[0].in_features, [m.out_features for m in layers], kernel
        self.op = _op(kernel)
        self.out_features = sum(self.sizes)
        self.packed, self.scale = _packed(torch.cat([m.weight.detach().float() for m in layers]), kernel)
        biases = [m.bias for m in layers]
        self.bias = None if all(b is None for b in biases) else torch.nn.Parameter(
            torch.cat([(b if b is not None else torch.zeros(m.out_features)).detach().float()
                       for b, m in zip(biases, layers)]), requires_grad=False)
        self.weight = None


class RowInt8Part(torch.nn.Module):
    """One of a RowInt8Fused's layers, where the model's own forward calls it (module doc)."""

    def __init__(self, fused: RowInt8Fused, i: int) -> None:
        super().__init__()
        self.fused, self.i = fused, i
        self.in_features, self.out_features = fused.in_features, fused.sizes[i]
        self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.part(x, self.i)

    def extra_repr(self) -> str:
        return f"part {self.i} of {self.fused.sizes}"


def quantize_int8(model: torch.nn.Module, head_weight: bool = True, kernel: str = "onednn") -> int:
    """A float32 model's linear layers, the LM head included, in int8, in place: RowInt8Linear,
    or one RowInt8Fused for the layers in a FUSED group (their parts stay, as RowInt8Part). For a
    target (`quantize: int8`), speculation is exact against this int8 model (under pinned
    shapes: the attention stays float); SmolLM2-135M's greedy text stays on the float model's
    for 4-27 tokens on six prompts, then goes its own, as fluent, way (docs/kernels.md).
    `head_weight`: the LM head keeps its float weight (a features draft reads a target's; a tied
    one is the embedding, kept either way). `kernel`: onednn for a target, whose verify forwards
    are several rows wide (on a Xeon a 5-row step cost 0.81x fbgemm's), fbgemm for a model
    draft's one-token steps (0.90x oneDNN's): docs/kernels.md. Returns the linear layers
    replaced. CPU only."""
    _op(kernel)  # a torch without it fails here, before any layer is replaced
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    keep = head if head_weight or tied else None
    replaced = 0
    for parent in list(model.modules()):
        for names, layers in groups(parent, lambda m: type(m) is torch.nn.Linear):
            fused = RowInt8Fused(layers, kernel)
            for i, name in enumerate(names):
                setattr(parent, name, RowInt8Part(fused, i))
            replaced += len(names)
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, RowInt8Linear(child, keep=child is keep, kernel=kernel))
                replaced += 1
    return replaced
