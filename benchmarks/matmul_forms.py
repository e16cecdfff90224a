"""The three matmul forms of kernels.py on SmolLM2-135M's linear shapes, weights cold (the whole
model's worth, cycled through, as a forward streams them): milliseconds for all 30 layers' seven
matmuls (body) and the LM head at a given number of matmul rows (tokens in one forward); beside
them two forms measured and not kept: int8 with each row scaled alone, and bfloat16.

    .venv/bin/python benchmarks/matmul_forms.py 1 2 8 16 40

Random weights of the model's shapes; THREADS torch threads (default 2, like the benchmarks). What kernels.py's
docstring quotes; the cost profile measures the real model on your machine instead.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

LAYER = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # q k v o gate up down
HEAD = (49152, 576)


def main(counts: list[int]) -> None:
    torch.set_num_threads(int(__import__("os").environ.get("THREADS", "2")))
    torch.manual_seed(0)
    weights = [torch.randn(o, i) * 0.02 for _ in range(30) for o, i in LAYER] + [torch.randn(*HEAD) * 0.02]
    packs = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in weights]
    int8 = [row_int8(w) for w in weights]
    halves = [w.bfloat16() for w in weights]
    forms = {"F.linear": lambda i, x: F.linear(x, weights[i]),
             "W @ xᵀ": lambda i, x: torch.mm(weights[i], x.t()).t().contiguous(),
             "prepacked": lambda i, x: torch.ops.mkldnn._linear_pointwise(x, packs[i], None, "none", [], ""),
             "row int8": lambda i, x: int8[i](x),
             "bf16 F.linear": lambda i, x: F.linear(x.bfloat16(), halves[i])}
    body, head = range(len(weights) - 1), [len(weights) - 1]
    for rows in counts:
        inputs = {576: torch.randn(rows, 576), 1536: torch.randn(rows, 1536)}
        cells = []
        for name, form in forms.items():
            ms = [seconds(form, part, weights, inputs) * 1e3 for part in (body, head)]
            cells.append(f"{name} {ms[0]:.1f} + {ms[1]:.1f}")
        print(f"{rows:3d} rows: " + " | ".join(cells), flush=True)


def row_int8(w: torch.Tensor):
    """x -> x @ wᵀ in int8 with rows independent (the `quantize: int8` target measured and not
    kept, docs/kernels.md): per-channel int8 weights (fbgemm), each input row scaled by its own
    absmax, int32 sums, scaled back."""
    scale = w.abs().amax(1) / 127
    q = torch.quantize_per_channel(w, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(q, None)
    op = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32

    def run(x: torch.Tensor) -> torch.Tensor:
        step = x.abs().amax(-1, keepdim=True) / 127
        return op(x / step, 1.0, 128, packed) * step
    return run


def seconds(form, layers, weights, inputs, repeats: int = 5) -> float:
    for _ in range(2):
        [form(i, inputs[weights[i].shape[1]]) for i in layers]
    start = time.perf_counter()
    for _ in range(repeats):
        [form(i, inputs[weights[i].shape[1]]) for i in layers]
    return (time.perf_counter() - start) / repeats


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 2, 8, 16, 40])
