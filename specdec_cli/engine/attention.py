"""The attention the KV cache runs on a CPU (`grouped_attention`): grouped-query sdpa reading the
cache in place, and, under pinned shapes, the detours that keep token trees bitwise exact.

A pinned forward is bitwise a plain step's only if each query sees its keys at the columns a
plain step would give them: sdpa's sums over a query's keys run in an order set by their columns.
A tree slot off the first chain has its ancestors at other columns (slot s at length + s, not at
length + depth), so its logits would differ in the last bits (benchmarks/tree_mask.py measured
3 of 15). A `Detour` gives such a slot its own copy of the row's K/V with its ancestors moved to
columns length .. length + depth, as a chain would hold them, and recomputes its attention there
in one more sdpa call per layer (a batch of the detoured slots): the same kernel, the same shapes,
the same columns as the plain step that would decode its token.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


@dataclass(frozen=True)
class Detour:
    """One tree slot whose attention runs over a chain layout: row `row`'s keys with columns
    `path` (its ancestors, then itself) copied to length .. length + depth, seen up to `last`."""

    row: int
    slot: int
    path: torch.Tensor  # [depth + 1] the columns its path sits at now
    chain: torch.Tensor  # [depth + 1] the columns a chain would hold it at
    last: int  # length + depth: the last column the slot sees

    @classmethod
    def of(cls, row: int, slot: int, path: list[int], length: int, device) -> Detour:
        chain = list(range(length, length + len(path)))
        return cls(row, slot, torch.tensor(path, device=device), torch.tensor(chain, device=device), chain[-1])


def grouped_sdpa(query, key, value, mask, g, dropout, scaling):
    """query [B, H, S, D] over key, value [B, KV, width, D] with each KV head's G query heads in
    the query dimension (head h = kv * g + j, repeat_kv's order -> row j * S + s of head kv), the
    mask [B, 1, G*S, width] repeated to match (`grouped_mask`): [B, H, S, D] out."""
    b, h, s, d = query.shape
    out = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(b, h // g, g * s, d), key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.view(b, h, s, d)


def grouped_mask(mask: torch.Tensor, g: int) -> torch.Tensor:
    """mask [B, 1, S, width] -> [B, 1, G*S, width], the rows of grouped_sdpa's grouped queries."""
    return mask.repeat(1, 1, g, 1)


@dataclass(frozen=True)
class Detours:
    """One forward's detours, prepared once for all its layers (each layer's K/V differ, the
    columns and masks do not): the rows and slots, the columns each slot's chain layout takes from
    elsewhere in its row (`moved`: which detour, `chain` <- `path` of row `source`), and what each
    slot sees there (grouped as grouped_sdpa's queries)."""

    rows: torch.Tensor  # [n]
    slots: torch.Tensor  # [n]
    moved: torch.Tensor  # [m] the detour each moved column belongs to
    chain: torch.Tensor  # [m] the column it goes to
    path: torch.Tensor  # [m] the column of the row's K/V it comes from
    source: torch.Tensor  # [m] that row (rows[moved])
    mask: torch.Tensor  # [n, 1, G*S, width]
    g: int

    @classmethod
    def of(cls, detours: list[Detour], width: int, queries: int, g: int) -> Detours:
        device = detours[0].path.device
        column = torch.arange(width, device=device)
        seen = torch.stack([column <= t.last for t in detours])[:, None, None, :].expand(-1, 1, queries, -1)
        rows = torch.tensor([t.row for t in detours], device=device)
        moved = torch.cat([torch.full_like(t.path, i) for i, t in enumerate(detours)])
        return cls(rows, torch.tensor([t.slot for t in detours], device=device), moved,
                   torch.cat([t.chain for t in detours]), torch.cat([t.path for t in detours]), rows[moved],
                   grouped_mask(seen, g), g)

    def apply(self, out, query, key, value, dropout, scaling) -> torch.Tensor:
        """`out` [B, H, S, D] with each detoured slot's rows recomputed over its chain layout: a
        copy of its row's K/V (one contiguous copy; a gather by column was 4-18x slower) with
        its path's columns moved into place."""
        keys, values = key.index_select(0, self.rows), value.index_select(0, self.rows)  # [n, KV, width, D]
        keys[self.moved, :, self.chain] = key[self.source, :, self.path]
        values[self.moved, :, self.chain] = value[self.source, :, self.path]
        again = grouped_sdpa(query[self.rows], keys, values, self.mask, self.g, dropout, scaling)  # [n, H, S, D]
        out = out.clone()
        out[self.rows, :, self.slots] = again[torch.arange(len(self.rows)), :, self.slots]
        return out


@contextmanager
def grouped_attention(on: bool, detours: list[Detour] = ()):
    """transformers' sdpa, given a mask and S > 1 queries, copies K and V once per query head
    (repeat_kv). Here each key/value head's G query heads ride in the query dimension instead
    ([B, H, S, D] -> [B, KV, G*S, D], the mask repeated to match), as transformers' own
    pack_gqa does for one query: the cache is read in place, by one plain sdpa call per layer
    (docs/kernels.md has the timings), the repeated mask made once per forward, not per layer;
    `detours` (pinned trees) recompute their slots. Not on a
    GPU, where sdpa's fused kernels take GQA with a mask their own way."""
    if not on:
        yield
        return
    plain = ALL_ATTENTION_FUNCTIONS["sdpa"]
    made = [None, None, None]  # (the mask every layer is given, it repeated for the grouped queries, the
    # detours prepared): once per forward

    def grouped(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if attention_mask is None or attention_mask.dtype != torch.bool or kwargs.get("softcap") is not None:
            return plain(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        g = query.shape[1] // key.shape[1]
        if made[0] is not attention_mask:  # a new forward, or a layer of the other type (sliding: its own mask)
            made[:] = (attention_mask, grouped_mask(attention_mask, g),
                       Detours.of(detours, key.shape[2], query.shape[2], g) if detours else None)
        out = grouped_sdpa(query, key, value, made[1], g, dropout, scaling)  # [B, H, S, D]
        if made[2] is not None:
            out = made[2].apply(out, query, key, value, dropout, scaling)
        return out.transpose(1, 2).contiguous(), None  # [B, S, H, D], as transformers' sdpa

    ALL_ATTENTION_FUNCTIONS["sdpa"] = grouped  # a local override of the shared registry...
    try:
        yield
    finally:
        del ALL_ATTENTION_FUNCTIONS["sdpa"]  # ...dropped, so the library-wide entry shows through again
        if ALL_ATTENTION_FUNCTIONS["sdpa"] is not plain:  # someone else's local override was there before
            ALL_ATTENTION_FUNCTIONS["sdpa"] = plain
