"""The data `specdec distill` trains on (distill.py): the target's own greedy continuations of
training prompts, with the hidden states (features, at the draft's taps) it computed on the way, made by HF
`generate` in batches (left-padded) and cached per batch in the user cache, so a rerun skips
what it already made; the draft's vocabulary; and padded training batches of them.

Features: hooks on the target's decoder keep the hidden states at the draft's taps
(engine/taps.py) that `generate` computes anyway; the labels y_i are the greedy tokens it chose (no
second pass). A batch cached with the final hidden state alone (an EAGLE-1 run's) is re-tapped
by one teacher-forced forward over its sequences (`retap`) instead of being generated again.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specdec_cli.engine.taps import ONLY_FINAL, tapping
from specdec_cli.errors import SpecdecError
from specdec_cli.files import cache_dir, write_atomic
from specdec_cli.cards.prompts import Prompt

CACHE_FORMAT = "distill-batch/1"  # part of every cached batch's key: a new layout never reads an old file

Report = Callable[[float, float, int, int], None]  # (done, total, training prompts, training tokens) so far


@dataclass
class Sequence:
    """One prompt with the target's greedy answer: what the draft learns from (or is measured on)."""

    ids: list[int]  # prompt + the target's greedy continuation
    prompt_len: int
    heldout: bool
    features: torch.Tensor | None = None  # [S, T * H] the taps at position i (f_i alone: EAGLE-1), float16
    labels: torch.Tensor | None = None  # [S] y_i: the target's greedy token after position i (-1: in the prompt)


def order_prompts(prompts: list[Prompt], seed: int) -> list[Prompt]:
    """Shuffle within each category, then interleave the categories: any prefix is balanced."""
    rng, groups = random.Random(seed), {}
    for p in prompts:
        groups.setdefault(p.category, []).append(p)
    for group in groups.values():
        rng.shuffle(group)
    ordered, lists = [], list(groups.values())
    for i in range(max(map(len, lists), default=0)):
        ordered += [g[i] for g in lists if i < len(g)]
    return ordered


def spread(ordered: list[Prompt], extra: list[Prompt]) -> list[Prompt]:
    """`extra` spread evenly among `ordered` (each keeps its order), so any prefix holds both in
    proportion; with no extra, `ordered` itself."""
    keyed = [((i + 0.5) / len(ordered), 0, p) for i, p in enumerate(ordered)]
    keyed += [((i + 0.5) / len(extra), 1, p) for i, p in enumerate(extra)]
    return [p for *_, p in sorted(keyed, key=lambda k: k[:2])]


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """Hidden states as the data keeps them: on the host, in float16."""
    return t.to("cpu", torch.float16)


@torch.no_grad()
def continuations(pair, batch: list[list[int]], max_new_tokens: int, taps: tuple[int, ...] = ONLY_FINAL) -> list[Sequence]:
    """The target's greedy continuations of a batch of prompt ids (left-padded `generate`), with
    the features it computed on the way: hooks keep each decoder call's hidden states at `taps`
    (prefill: the prompts; then one position per step), so no second pass is needed.

    A row generating g_1..g_n (cut after its first EOS) becomes ids = prompt + g_1..g_{n-1}
    (g_n is never fed, so it has no feature) and labels y_i = g_{i-P+2} for i >= P-1: the
    target's own greedy token after position i; -1 inside the prompt (no label needed there:
    the draft only ever drafts after the prompt). Features are kept as float16."""
    model, pad = pair.target.model, 0
    width = max(map(len, batch))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=pair.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=pair.device)
    eos = sorted(pair.eos)
    with tapping(model, taps, _to_host) as calls:  # each step's, off the device at once
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, min_new_tokens=1,
                             do_sample=False, eos_token_id=eos or None, pad_token_id=eos[0] if eos else pad)
    generated = out[:, width:].tolist()
    steps = torch.cat(calls[1:], dim=1) if len(calls) > 1 else calls[0][:, :0]  # [B, n-1, H]
    if calls[0].shape[1] != width or steps.shape[1] != len(generated[0]) - 1:
        raise SpecdecError(f"internal error: {type(model).__name__}.generate called its decoder in an unexpected "
                           f"pattern ({[c.shape[1] for c in calls[:4]]}...), so its features cannot be kept")
    result = []
    for b, (prompt, row) in enumerate(zip(batch, generated)):
        n = next((i + 1 for i, t in enumerate(row) if t in pair.eos), len(row))
        feats = torch.cat([calls[0][b, width - len(prompt):], steps[b, : n - 1]])  # [P + n - 1, H]
        labels = torch.tensor([-1] * (len(prompt) - 1) + row[:n])
        result.append(Sequence(prompt + row[: n - 1], len(prompt), False, feats, labels))
    return result


@torch.no_grad()
def retap(pair, seqs: list[Sequence], taps: tuple[int, ...], rows: int = 8) -> None:
    """Each sequence's features replaced by its taps, from teacher-forced forwards of the target's
    decoder over its ids (right-padded, `rows` at a time: causal attention keeps the padding
    out of every real position). The same hidden states `generate` computed, to float rounding."""
    decoder = pair.target.model.get_decoder()
    for i in range(0, len(seqs), rows):
        group = seqs[i:i + rows]
        width = max(len(q.ids) for q in group)
        ids = torch.tensor([q.ids + [0] * (width - len(q.ids)) for q in group], device=pair.device)
        with tapping(pair.target.model, taps, _to_host) as calls:
            decoder(input_ids=ids, use_cache=False)
        for q, row in zip(group, calls[-1]):
            q.features = row[:len(q.ids)].clone()


def _save_batch(path: Path, seqs: list[Sequence]) -> None:
    from safetensors.torch import save_file

    save_file({"ids": torch.tensor([t for q in seqs for t in q.ids]), "labels": torch.cat([q.labels for q in seqs]),
               "features": torch.cat([q.features for q in seqs]), "prompt_lens": torch.tensor([q.prompt_len for q in seqs]),
               "lengths": torch.tensor([len(q.ids) for q in seqs])}, str(path))


def _load_batch(path: Path) -> list[Sequence]:
    from safetensors.torch import load_file

    t = load_file(str(path))
    seqs, at = [], 0
    for n, p in zip(t["lengths"].tolist(), t["prompt_lens"].tolist()):
        seqs.append(Sequence(t["ids"][at:at + n].tolist(), p, False, t["features"][at:at + n], t["labels"][at:at + n]))
        at += n
    return seqs


def make_data(pair, prompts: list[Prompt], heldout: int, wanted: int | None, gen_batch: int, max_new_tokens: int,
              fingerprint: str, deadline: float | None, report: Report, taps: tuple[int, ...] = ONLY_FINAL) -> list[Sequence]:
    """Held-out prompts first (`heldout`, at most a fifth of them), then training prompts, batch
    by batch (`gen_batch` prompts a `generate` call) until the prompts run out, `wanted`
    training prompts are done, or the deadline passes (whole batches only; with `wanted` given
    the clock is ignored). Each batch is cached in the user cache (keyed by target, its dtype (the
    answers are its greedy ones in it), prompts and length, and the taps beyond the final one): a
    rerun reuses it, and a batch cached for the final tap alone is re-tapped (retap) rather than
    generated again."""
    held = min(heldout, max(1, len(prompts) // 5))
    want = len(prompts) - held if wanted is None else min(wanted, len(prompts) - held)
    if want < 1:
        raise SpecdecError(f"need at least {held + 1} prompts ({held} held out + 1 to train on), got {len(prompts)}")
    encoded = [pair.tokenizer.encode(p.text, chat=pair.chat) for p in prompts[: held + want]]
    limit = pair.target.max_positions
    room = max_new_tokens if not limit else min(max_new_tokens, limit - max(map(len, encoded)))
    if room < 1:
        raise SpecdecError(f"training prompts leave no room to generate within the target's context window of {limit}")
    seqs, start = [], time.monotonic()
    chunks = [range(i, min(i + gen_batch, held)) for i in range(0, held, gen_batch)]
    chunks += [range(i, min(i + gen_batch, held + want)) for i in range(held, held + want, gen_batch)]
    for rows in chunks:
        if deadline is not None and wanted is None and time.monotonic() > deadline and any(not q.heldout for q in seqs):
            break
        batch = [encoded[i] for i in rows]
        made = _cached(pair, batch, room, fingerprint, taps)
        for i, q in zip(rows, made):
            q.heldout = i < held
        seqs += made
        train = [q for q in seqs if not q.heldout]
        report(time.monotonic() - start, (deadline - start) if deadline else 1, len(train), sum(len(q.ids) for q in train))
    return seqs


def _cached(pair, batch: list[list[int]], room: int, fingerprint: str, taps: tuple[int, ...]) -> list[Sequence]:
    """One batch's sequences with their taps: from the cache, re-tapped from the final tap's
    cached batch, or generated; whatever was made is cached (make_data)."""
    def path(taps):
        key = [CACHE_FORMAT, fingerprint, str(pair.target.model.dtype), room, batch]
        key += [list(taps)] if taps != ONLY_FINAL else []
        return cache_dir("distill", fingerprint[:16]) / f"{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]}.safetensors"

    cached = path(taps)
    try:
        return _load_batch(cached)
    except Exception:  # noqa: BLE001 - absent or unreadable: make it
        pass
    made = None
    if taps != ONLY_FINAL:
        try:
            made = _load_batch(path(ONLY_FINAL))
        except Exception:  # noqa: BLE001 - absent or unreadable: generate it
            pass
    if made is not None:
        retap(pair, made, taps)
    else:
        made = continuations(pair, batch, room, taps)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cached, lambda p: _save_batch(p, made), "distill cache")
    except OSError:
        pass  # the cache is an optimisation only
    return made


def draft_vocab(seqs: list[Sequence], size: int, target_vocab: int) -> torch.Tensor:
    """`size` target ids for the draft's head (all of them when size >= the vocabulary): the
    first `size` ids (byte-level BPE numbers tokens roughly by frequency; the head is then a
    view of the target's, shared) or the `size` most frequent tokens of the training answers,
    whichever covers more of the held-out answers. Ascending ids; ties prefer the prefix."""
    if size >= target_vocab:
        return torch.arange(target_vocab)
    counts = Counter()
    for q in seqs:
        if not q.heldout:
            counts.update(t for t in q.labels.tolist() if t >= 0)
    frequent = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
    seen = set(frequent)  # a corpus with fewer distinct tokens: fill up with the lowest other ids
    frequent = sorted(frequent + [t for t in range(target_vocab) if t not in seen][: size - len(frequent)])
    held = [t for q in seqs if q.heldout for t in q.labels.tolist() if t >= 0]
    if sum(t < size for t in held) >= sum(t in seen for t in held):
        return torch.arange(size)
    return torch.tensor(frequent)


class Batcher:
    """Padded training batches: features [B, S, T * H], embeds [B, S+U, H], labels (draft rows,
    -1 = outside the draft vocabulary or padding) [B, S], lengths [B]."""

    def __init__(self, pair, seqs: list[Sequence], vocab_ids: torch.Tensor, unroll: int):
        self.embed = pair.target.model.get_input_embeddings()
        self.device, self.unroll = pair.device, unroll
        row = torch.full((pair.target.vocab_size,), -1, dtype=torch.long)
        row[vocab_ids] = torch.arange(vocab_ids.shape[0])
        self.row = row.to(pair.device)
        self.seqs = seqs

    @torch.no_grad()
    def __call__(self, items: list[Sequence]):
        B, S = len(items), max(len(q.ids) for q in items)
        H = items[0].features.shape[1]
        feats = torch.zeros(B, S, H, device=self.device)
        ids = torch.zeros(B, S + self.unroll, dtype=torch.long, device=self.device)
        labels = torch.full((B, S), -1, dtype=torch.long, device=self.device)
        lengths = torch.tensor([len(q.ids) for q in items], device=self.device)
        for b, q in enumerate(items):
            n = len(q.ids)
            feats[b, :n] = q.features.to(self.device, torch.float32)
            ids[b, :n] = torch.tensor(q.ids, device=self.device)
            labels[b, :n] = torch.where(q.labels >= 0, self.row[q.labels.clamp(min=0).to(self.device)], -1)
        embeds = self.embed(ids).float() * (torch.arange(S + self.unroll, device=self.device)[None] < lengths[:, None])[..., None]
        return feats, embeds, labels, lengths
