"""Where a float32 decode step goes on this CPU: the step through the loop's KV cache, the share
torch's profiler gives its matmuls, and the bandwidth one-row F.linear reaches on each of the
target's weight shapes when the weights come from memory (enough distinct copies to pass any
cache), against the bytes a step must stream.

    .venv/bin/python benchmarks/step_split.py [CARD]      # default smollm2

docs/kernels.md quotes its output; record `lscpu | grep 'Model name'` beside any figure.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from specdec_cli.cards.card import load_card
from specdec_cli.engine.kvcache import KVCache
from specdec_cli.pair.loading import load_pair

STEPS = 40
MATMULS = ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise")
STREAMED = 600e6  # bytes of distinct weight copies per shape: more than any cache here


def step_ms(cache: KVCache, token: int) -> float:
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        cache.forward(torch.tensor([[token]])).argmax(-1).tolist()
        times.append(time.perf_counter() - start)
        cache.keep([1])
    return statistics.median(times) * 1e3


def matmul_share(cache: KVCache, token: int) -> float:
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(10):
            cache.forward(torch.tensor([[token]])).argmax(-1).tolist()
            cache.keep([1])
    events = p.key_averages()
    return sum(e.self_cpu_time_total for e in events if e.key in MATMULS) / sum(e.self_cpu_time_total for e in events)


def bandwidth(shape: tuple[int, int]) -> float:
    """GB/s of one-row F.linear over distinct weights of `shape` (each call streams from memory)."""
    out, inner = shape
    copies = max(2, int(STREAMED // (out * inner * 4)))
    weights = [torch.randn(out, inner) for _ in range(copies)]
    x = torch.randn(1, inner)
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for w in weights:
            F.linear(x, w)
        rounds.append((time.perf_counter() - start) / copies)
    return out * inner * 4 / statistics.median(rounds) / 1e9


def main(card: str) -> None:
    pair = load_pair(load_card(card))
    pair.prepare(pair.card.k)  # the matmul forms the cost profile chose, as a run takes them
    ids = pair.encode("Explain what a hash table is.", STEPS)
    model = pair.target.model
    weights = {p.data_ptr(): p for m in model.modules() if isinstance(m, torch.nn.Linear) for p in [m.weight]}
    streamed = sum(p.numel() * p.element_size() for p in weights.values())
    with torch.inference_mode():
        cache = KVCache(pair.target)
        cache.add(ids)
        ms = step_ms(cache, ids[-1])
        share = matmul_share(cache, ids[-1])
    print(f"{card}: a 1-token step {ms:.1f} ms (median of {STEPS}); its matmuls {share:.0%} of the profiled CPU time; "
          f"{streamed / 1e6:.0f} MB of linear weights, {streamed / ms / 1e6:.1f} GB/s over the whole step")
    rates = {shape: bandwidth(shape) for shape in sorted({tuple(p.shape) for p in weights.values()})}
    for (out, inner), rate in rates.items():
        print(f"  F.linear, one row, {out}x{inner} from memory: {rate:.1f} GB/s ({torch.get_num_threads()} threads)")
    floor = sum(p.numel() * p.element_size() / rates[tuple(p.shape)] for p in weights.values()) / 1e6
    print(f"every linear weight streamed once at those rates: {floor:.1f} ms of the {ms:.1f} ms step")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "smollm2")
