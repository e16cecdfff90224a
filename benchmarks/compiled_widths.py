"""ms of one target forward [1, n], n = 1..WIDTHS, after 100 tokens, through the loop's own KV
cache at a fixed capacity: eager F.linear, then compiled (decoding.compile; the card loaded twice),
with v(n) for each and the seconds the compile took (a later run reads specdec's compile cache).
With --profile, torch.profiler's table for 20 compiled 1-token steps (where a step's time goes).

    .venv/bin/python benchmarks/compiled_widths.py [--card smollm2] [--capacity 512] [--widths 5] [--profile]

docs/kernels.md quotes its output; record `lscpu | grep 'Model name'` beside any figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from specdec_cli.cards.card import load_card
from specdec_cli.engine.kvcache import cache_for
from specdec_cli.pair.loading import load_pair


def step_ms(cache, n: int, tries: int = 30) -> float:
    ids = torch.tensor([[5] * n])
    times = []
    for _ in range(tries):
        start = time.perf_counter()
        cache.forward(ids)
        cache.keep([0])
        times.append(time.perf_counter() - start)
    return sorted(times)[tries // 2] * 1e3


def curve(lm, capacity: int, widths: int) -> list[float]:
    cache = cache_for(lm, rows=1, width=None, capacity=capacity)
    start = time.perf_counter()
    cache.warm(range(1, widths + 1))
    if lm.compiled:
        print(f"compiled widths 1..{widths} in {time.perf_counter() - start:.1f} s")
    cache.add(list(range(100, 200)))
    return [step_ms(cache, n) for n in range(1, widths + 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--card", default="smollm2")
    parser.add_argument("--capacity", type=int, default=512)
    parser.add_argument("--widths", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    card = load_card(args.card)
    eager_lm = load_pair(dataclasses.replace(card, compile=False)).target
    lm = load_pair(dataclasses.replace(card, compile=True)).target
    with torch.inference_mode():
        eager = curve(eager_lm, args.capacity, args.widths)
        compiled = curve(lm, args.capacity, args.widths)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            cache = cache_for(lm, rows=1, width=None, capacity=args.capacity)
            cache.add(list(range(100, 200)))
            with profile(activities=[ProfilerActivity.CPU]) as p:
                for _ in range(20):
                    cache.forward(torch.tensor([[5]])).argmax(-1).tolist()
                    cache.keep([0])
            print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    for name, ms in (("compiled", compiled), ("eager F.linear", eager)):
        print(f"{name}: ms {' '.join(f'{x:.2f}' for x in ms)}; v(n) {' '.join(f'{x / ms[0]:.2f}' for x in ms)}")


if __name__ == "__main__":
    main()
