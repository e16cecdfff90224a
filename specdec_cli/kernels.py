"""Few-token matmuls for the target's verify forward on a CPU.

A verify feeds d+1 <= 9 tokens through every linear layer of the target, so each layer computes
x @ Wᵀ for a handful of rows. On the 2-core CPUs we measured (torch 2.13, MKL), that GEMM costs
1.6-3.5x the 1-row GEMV of a greedy step, and not monotonically in the row count, while the same
product taken weight-major, (W @ xᵀ)ᵀ, streams the weights once and costs 0.8-1.6x for the large
layers. Whole model, 5 new tokens after 200 (in 1-token steps): SmolLM2-135M 1.25 -> 1.09,
Qwen2.5-Coder-1.5B 2.04 -> 1.89; at 2..4 tokens 1.6-2.7 -> 0.8-1.6. Which form is faster
depends on the machine, the shapes and the row count, so nothing here is assumed: the cost
profile (costs.choose_weight_major) times both for every width and keeps the faster:
`WeightMajor.widths` holds the widths n of a one-row verify [1, n] that take W @ xᵀ, and
`WeightMajor.rectangles` the (rows, n) of a batched verify [rows, n] (batch.rectangle_seconds).

A 1-token forward (the greedy step, the one every exactness check compares with, including
transformers' own generate) and every prefill (HFLM.forward pauses the switch when it keeps
only the last logits, so a 5-token prompt's prefill is torch's too) always take torch's own
F.linear, untouched. The rows W @ xᵀ returns differ from the GEMV's in the last bits,
as the GEMM's rows already did (max 1e-5 on Qwen's down projection, either way): the fp32
rounding class the verify-exactness runs cover.

A batched verify [rows, n] (rows >= 2) has a third form: oneDNN's prepacked weights
(torch.ops.mkldnn._reorder_linear_weight / _linear_pointwise, what torch.compile's CPU backend
runs after freezing). Each layer's weight is reordered once, on first use, into a blocked copy
(the target's weights twice in memory: +0.54 GB for SmolLM2-135M in fp32). On our 2-core CPU its
matmuls for the whole SmolLM2 body and head cost 29 ms at 8 rows against F.linear's 66 and W @ xᵀ's
45; 37 against 76 and 63 at 16 rows; 67 against 108 at 40 (benchmarks/matmul_forms.py, cold
weights). Only float32: nothing here measured it in bfloat16. `WeightMajor.packed` holds the
(rows, n) that take it, from the same measurement. Its rows differ from F.linear's in the last
bits too (6.7e-5 on values of ~20).

SPECDEC_WEIGHT_MAJOR=off leaves every layer to F.linear; =all switches every width 2..k+1 on
without timing (an exactness audit of the form: each width's output depends only on its own
form, so `all` and `off` together cover every choice the profile can make); =packed likewise
switches every batched rectangle n >= 2 to the prepacked form.
"""

from __future__ import annotations

import os
from functools import partial

import torch
import torch.nn.functional as F

from .errors import SpecdecError

MODES = ("measure", "off", "all", "packed")


def mode() -> str:
    """SPECDEC_WEIGHT_MAJOR: measure (default), off, all or packed."""
    value = os.environ.get("SPECDEC_WEIGHT_MAJOR", "") or "measure"
    if value not in MODES:
        raise SpecdecError(f"SPECDEC_WEIGHT_MAJOR: expected one of {', '.join(MODES)}, got {value!r}")
    return value


class WeightMajor:
    """Which forwards' linear layers leave F.linear, by the forward's exact shape: `widths`, the
    n of a one-row forward [1, n] that compute W @ xᵀ; `rectangles`, the (rows, n) of a batched
    one [rows, n] that do; `packed`, the (rows, n) that take oneDNN's prepacked weights (kept in
    `packs`, one per layer, made on first use). While `paused` (a prefill) none do."""

    def __init__(self) -> None:
        self.widths: frozenset[int] = frozenset()
        self.rectangles: frozenset[tuple[int, int]] = frozenset()
        self.packed: frozenset[tuple[int, int]] = frozenset()
        self.packs: dict[torch.nn.Linear, torch.Tensor] = {}
        self.paused = False

    @staticmethod
    def shape(x: torch.Tensor) -> tuple[int, int]:
        """x: [..., in]; [rows, n, in] is one forward of rows x n tokens ([n, in]: one row)."""
        rows = x.shape[0] if x.dim() >= 3 else 1
        return rows, x.numel() // x.shape[-1] // rows

    def takes(self, x: torch.Tensor) -> bool:
        """Whether x's forward leaves F.linear (for W @ xᵀ or the prepacked weights)."""
        if self.paused:
            return False
        rows, n = key = self.shape(x)
        return n in self.widths if rows == 1 else key in self.rectangles or key in self.packed

    def pack(self, layer: torch.nn.Linear) -> torch.Tensor:
        if layer not in self.packs:
            self.packs[layer] = torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), None)
        return self.packs[layer]

    def unpack(self) -> None:
        """Free the prepacked copies (a measurement that did not choose them)."""
        self.packs.clear()


def can_pack(model: torch.nn.Module) -> bool:
    """oneDNN's prepacked linear runs here: a CPU float32 model, a torch with mkldnn."""
    try:
        ops = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return False
    weight = next((m.weight for m in model.modules() if type(m) is torch.nn.Linear), None)
    return (all(ops) and torch.backends.mkldnn.is_available() and weight is not None
            and weight.device.type == "cpu" and weight.dtype == torch.float32)


def install(model: torch.nn.Module) -> WeightMajor:
    """Route every nn.Linear of `model` through `_linear` (per instance: nothing else changes).
    With no widths set, that is F.linear exactly."""
    switch = WeightMajor()
    for module in model.modules():
        if type(module) is torch.nn.Linear:  # not the int8 or other subclasses
            module.forward = partial(_linear, module, switch)
    return switch


def _linear(layer: torch.nn.Linear, switch: WeightMajor, x: torch.Tensor) -> torch.Tensor:
    if not switch.takes(x):
        return F.linear(x, layer.weight, layer.bias)
    if switch.shape(x) in switch.packed:  # x: [rows, n, in] -> [rows, n, out]
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), switch.pack(layer), layer.bias, "none", [], "")
    rows = x.numel() // x.shape[-1]  # x: [..., in]; rows of the matmul = tokens in this forward (batch included)
    flat = x.reshape(rows, x.shape[-1]).t()  # [in, rows], a view
    if layer.bias is None:
        y = torch.mm(layer.weight, flat)  # [out, rows]
    else:
        y = torch.addmm(layer.bias[:, None], layer.weight, flat)
    return y.t().contiguous().view(*x.shape[:-1], y.shape[0])  # [..., out], row-major like F.linear's
