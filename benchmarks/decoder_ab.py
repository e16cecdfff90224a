"""The decoder (engine/decoder.py) against transformers' forward on a card's target: the same
KV cache and prompt, one forward of each, interleaved, at each width; medians in ms.

    .venv/bin/python benchmarks/decoder_ab.py [CARD] [WIDTH ...]     # default smollm2 1 5

Interleaving puts both under the same load (these shared machines drift by tens of percent
between runs). Each forward appends its width's positions and keeps one, as a greedy step does.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from specdec_cli.cards.card import load_card
from specdec_cli.engine.kvcache import KVCache
from specdec_cli.pair.loading import load_pair

STEPS = 120
PROMPT = "Explain what a hash table is."


def main(card: str, widths: list[int]) -> None:
    pair = load_pair(load_card(card))
    pair.prepare(pair.card.k)  # the matmul forms the cost profile chose, as a run takes them
    ids = pair.encode(PROMPT, STEPS)
    caches = {name: KVCache(pair.target, decoder=name == "decoder") for name in ("decoder", "transformers")}
    with torch.inference_mode():
        for cache in caches.values():
            cache.add(ids)
        for n in widths:
            seconds = {name: [] for name in caches}
            for _ in range(STEPS):
                for name, cache in caches.items():
                    start = time.perf_counter()
                    cache.forward(torch.full((1, n), ids[-1]))
                    seconds[name].append(time.perf_counter() - start)
                    cache.keep([1])
            print(f"width {n}: " + ", ".join(f"{name} {statistics.median(s) * 1e3:.1f} ms" for name, s in seconds.items()),
                  flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args and not args[0].isdigit() else "smollm2", [int(a) for a in args if a.isdigit()] or [1, 5])
