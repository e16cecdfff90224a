"""A card's plain greedy and speculative decode on one prompt, alternated in one process (these
shared machines drift by tens of percent between runs, so only back-to-back figures compare):
tok/s of each try, the ratio of the medians, tokens per round; every speculative run is checked
against its greedy one.

    .venv/bin/python benchmarks/spec_ab.py [CARD] [TRIES] [MAX_TOKENS]   # default smollm2 3 256

The prompt is the README's example; record `lscpu | grep 'Model name'` beside the figures.
"""

from __future__ import annotations

import statistics
import sys

from specdec_cli.cards.card import load_card
from specdec_cli.pair.loading import load_pair

PROMPT = "Explain what a hash table is."


def main(card: str, tries: int, max_tokens: int) -> None:
    pair = load_pair(load_card(card))
    ids, k = pair.encode(PROMPT, max_tokens), pair.card.k
    pair.prepare(k)
    greedy, spec = [], []
    for _ in range(tries):
        plain = pair.greedy(ids, max_tokens, k)  # pinned shapes: at the speculative run's width W
        fast = pair.spec(ids, k, max_tokens)
        assert fast.tokens == plain.tokens, "speculative left greedy"
        greedy.append(plain.stats.tokens_per_s)
        spec.append(fast.stats.tokens_per_s)
    print(f"{card} {pair.dtype_name} {pair.shapes}: greedy {[round(x, 1) for x in greedy]} tok/s, speculative "
          f"{[round(x, 1) for x in spec]} tok/s, ratio of medians {statistics.median(spec) / statistics.median(greedy):.3f}, "
          f"{fast.stats.tokens_per_round:.3f} tokens per round")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "smollm2", int(args[1]) if len(args) > 1 else 3, int(args[2]) if len(args) > 2 else 256)
