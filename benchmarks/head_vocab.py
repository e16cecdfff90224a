"""A features draft's head cut to fewer rows, without retraining (the rows are the target's own
LM head rows, so any subset of the draft vocabulary is a valid head): teacher-forced acceptance
by draft position on the suite's free-text prompts, as benchmarks/head_acceptance.py measures it,
and the draft's step time (one proposed token: head, argmax, block), sizes alternated.

    .venv/bin/python benchmarks/head_vocab.py [WEIGHTS] [SIZES]   # default: the shipped draft, 8192,6144,4096,3072,2048

A cut keeps the draft vocabulary's first N ids (its ids are ascending; byte-level BPE numbers
tokens roughly by frequency); a size above it adds the target's lowest other ids. Record `lscpu | grep 'Model name'` beside the times.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

from head_acceptance import acceptance, free_text
from specdec_cli.cards.card import load_card, override
from specdec_cli.drafts import features_block as features
from specdec_cli.drafts.features_draft import FeatureDraft
from specdec_cli.loop.schedule import expected_tokens
from specdec_cli.pair.loading import load_pair


def rows(ids: torch.Tensor, n: int) -> torch.Tensor:
    """n draft-vocabulary ids: the first n of `ids`, or all of them and the lowest others."""
    if n <= len(ids):
        return ids[:n]
    others = torch.ones(int(ids.max()) + n + 1, dtype=torch.bool)
    others[ids] = False
    return torch.cat([ids, others.nonzero()[: n - len(ids), 0].to(ids.device)]).sort().values


def main(weights: str, sizes: list[int]) -> None:
    pair = load_pair(override(load_card("smollm2"), dtype="float32"))
    block, ids, _ = features.load(Path(weights), pair.target)
    seqs = free_text(pair, 128, tuple(block.cfg.taps))
    context = seqs[0].ids
    drafts = {n: FeatureDraft(pair.target, block, rows(ids, n)) for n in sizes}
    times = {n: [] for n in sizes}
    for _ in range(5):
        for n in sizes:
            times[n].append(drafts[n].step_seconds(context))
    for n in sizes:
        alpha = acceptance(pair, block, rows(ids, n), seqs)
        print(f"{n} rows: α by position {' '.join(f'{a:.3f}' for a in alpha)}, expected tokens per round at k = 4 "
              f"{expected_tokens(alpha):.3f}, draft step {1000 * statistics.median(times[n]):.2f} ms (median of 5)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "cards/weights/smollm2-distilled.safetensors",
         [int(n) for n in args[1].split(",")] if len(args) > 1 else [8192, 6144, 4096, 3072, 2048])
