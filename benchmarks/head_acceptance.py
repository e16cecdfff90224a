"""Teacher-forced acceptance by draft position of features drafts on the benchmark suite's
free-text prompts (its conversation, qa, translation and code prompts: 13 the drafts never
trained on), every draft measured on the same continuations of the target: α_i, the share of
drafts whose i-th token is the target's greedy token, among those whose first i-1 were
(training/distill.py's `acceptance`, as `specdec distill` measures its held-out prompts).

    .venv/bin/python benchmarks/head_acceptance.py WEIGHTS [WEIGHTS ...] [--card smollm2] [--tokens 128]

Record `lscpu | grep 'Model name'` beside the figures (the answers are the target's greedy ones,
so the figures do not depend on the machine beyond float rounding).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from specdec_cli.cards.card import load_card
from specdec_cli.cards.prompts import SUITE
from specdec_cli.drafts import features_block as features
from specdec_cli.pair.loading import load_pair
from specdec_cli.training import distill, traindata

CATEGORIES = ("conversation", "qa", "translation", "code")


def sliced(seqs: list[traindata.Sequence], have: tuple[int, ...], want: tuple[int, ...], hidden: int):
    """The sequences with only the taps `want` of the features made at taps `have`."""
    parts = [slice(have.index(t) * hidden, (have.index(t) + 1) * hidden) for t in want]
    return [traindata.Sequence(q.ids, q.prompt_len, True, torch.cat([q.features[:, p] for p in parts], -1), q.labels)
            for q in seqs]


def free_text(pair, tokens: int, taps: tuple[int, ...]) -> list[traindata.Sequence]:
    """The target's greedy continuations of the suite's free-text prompts, with its hidden states
    at `taps`, held out (what `acceptance` measures on)."""
    prompts = [p for p in SUITE if p.category in CATEGORIES]
    with torch.inference_mode():
        seqs = traindata.continuations(pair, [pair.tokenizer.encode(p.text, chat=pair.chat) for p in prompts], tokens, taps)
    for q in seqs:
        q.heldout = True
    return seqs


def acceptance(pair, block, vocab_ids: torch.Tensor, seqs: list[traindata.Sequence]) -> list[float]:
    """α by draft position 1..4 of `block` with the head over `vocab_ids`, on `seqs` (at its taps)."""
    head = pair.target.model.get_output_embeddings().weight.detach()[vocab_ids].float()
    return distill.acceptance(block.float(), head, traindata.Batcher(pair, seqs, vocab_ids, 4), seqs, 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("weights", nargs="+")
    parser.add_argument("--card", default="smollm2")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    pair = load_pair(load_card(args.card))
    drafts = [(w, *features.load(Path(w), pair.target)) for w in args.weights]
    taps = tuple(dict.fromkeys(t for _, block, _, _ in drafts for t in block.cfg.taps))
    seqs = free_text(pair, args.tokens, taps)
    print(f"{len(seqs)} prompts ({', '.join(CATEGORIES)}), {sum(len(q.ids) - q.prompt_len for q in seqs)} "
          f"answer tokens, target {pair.card.target} ({pair.dtype_name})")
    for name, block, vocab_ids, meta in drafts:
        alpha = acceptance(pair, block, vocab_ids, sliced(seqs, taps, tuple(block.cfg.taps), block.cfg.hidden))
        print(f"{name}: taps {list(block.cfg.taps)}, steps {meta.get('steps', '?')}: "
              f"α by position {' '.join(f'{a:.3f}' for a in alpha)}")


if __name__ == "__main__":
    main()
