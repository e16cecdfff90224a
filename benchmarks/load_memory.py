"""Peak memory of loading a card's target alone in one dtype (engine/models.load), and what the
process holds after: the figure behind docs/kernels.md's bfloat16 folder.

    .venv/bin/python benchmarks/load_memory.py [CARD] [DTYPE]     # default qwen2.5-coder-1.5b bfloat16

One load per process (ru_maxrss is the process's peak); record `lscpu | grep 'Model name'` beside it.
"""

from __future__ import annotations

import resource
import sys
import time

import torch

from specdec_cli.cards.card import load_card
from specdec_cli.engine.memory import peak_rss_mb
from specdec_cli.engine.models import load, model_ref


def main(card_name: str, dtype: str) -> None:
    card = load_card(card_name)
    start = time.perf_counter()
    lm, _ = load(model_ref(card, "target", card.target), torch.device("cpu"), getattr(torch, dtype))
    seconds = time.perf_counter() - start
    held = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 1e9
    print(f"{card_name} {dtype}: load {seconds:.1f} s, peak {peak_rss_mb() * 2**20 / 1e9:.2f} GB, held after {held:.2f} GB")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "qwen2.5-coder-1.5b", args[1] if len(args) > 1 else "bfloat16")
