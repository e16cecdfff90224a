"""A transformers target's batch rows in a KV cache the loop owns (batch.py's HF path).

Why not transformers' DynamicCache with left padding: every forward it concatenates the whole
cache per layer (torch.cat: 34 % of the self CPU time of a batch-8 greedy run under torch's
profiler), and rows that reject different amounts of a verify leave holes that widen every
later attention, or force re-packing. On our 2-core CPU (batch 8, 21 suite prompts, medians of
3 alternating passes) this cache left greedy where it was (53.3 -> 52.9 tok/s) and took
speculative from 67.0 to 78.0 tok/s. Here each layer keeps K and V in buffers [rows, H, capacity, D] written in
place; row i owns columns 0..length[i]-1, position ids are columns, and a forward's mask shows
query s of row i the columns j <= length[i] + s. Rolling back is lowering a length.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers.cache_utils import DynamicLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .decoding import prefill
from .errors import SpecdecError


class RowLayer(DynamicLayer):
    """One decoder layer of HFRows' cache: K and V buffers [rows, H, capacity, D] written in
    place. `update` writes each row's new positions at that row's own columns (rows.at) and
    hands attention the first rows.width columns: a view, no copy."""

    def __init__(self, rows: HFRows, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.rows, self.keys, self.values, self.is_initialized = rows, keys, values, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        b, width = key_states.shape[0], self.rows.width
        at = self.rows.at.to(key_states.device).expand_as(key_states)  # device_map: auto spreads the layers
        self.keys[:b].scatter_(2, at, key_states)
        self.values[:b].scatter_(2, at, value_states)
        return self.keys[:b, :, :width], self.values[:b, :, :width]

    def get_seq_length(self) -> int:
        return self.rows.width


class HFRows:
    """An HFLM's rows (see the module doc): add, select, forward [B, S], keep, as SerialRows."""

    COLUMNS = 64  # the buffers' first width; they double when a forward needs more

    def __init__(self, lm, card_name: str = "the target", rows: int = 1):
        self.lm, self.width, self.lengths = lm, 0, []
        probe = lm.new_cache()
        odd = sorted({type(layer).__name__ for layer in probe.layers if type(layer) is not DynamicLayer})
        if odd:
            raise SpecdecError(f"--batch: {card_name}: the target's cache has {', '.join(odd)} layers (sliding window "
                               "or other non-plain attention), which batched decoding does not support; use --batch 1")
        self.attention = lm.config._attn_implementation
        if self.attention not in ("sdpa", "eager"):
            raise SpecdecError(f"--batch: {card_name}: attention {self.attention!r} takes no per-row mask here; "
                               "batched decoding runs sdpa or eager attention; use --batch 1")
        lm.forward(torch.zeros(1, 1, dtype=torch.long, device=lm.device), probe)  # shapes and dtypes per layer
        self.cache = lm.new_cache()
        self.cache.layers = [RowLayer(self, *(t.new_zeros(rows, t.shape[1], self.COLUMNS, t.shape[3])
                                              for t in (layer.keys, layer.values))) for layer in probe.layers]

    def _reserve(self, rows: int, width: int) -> None:
        """Buffers for at least `rows` rows and `width` columns (doubling, old contents kept)."""
        have = self.cache.layers[0].keys
        if rows <= have.shape[0] and width <= have.shape[2]:
            return
        rows, width = max(rows, have.shape[0]), max(width, 2 * have.shape[2])
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                new = old.new_zeros(rows, old.shape[1], width, old.shape[3])
                new[: old.shape[0], :, : old.shape[2]] = old
                setattr(layer, name, new)

    def add(self, prompt: list[int]) -> int:
        alone = self.lm.new_cache()
        forwards = prefill(self.lm, alone, prompt)
        row, n = len(self.lengths), len(prompt) - 1
        self._reserve(row + 1, n)
        if n:
            for layer, own in zip(self.cache.layers, alone.layers):
                layer.keys[row, :, :n], layer.values[row, :, :n] = own.keys[0], own.values[0]
        self.lengths.append(n)
        return forwards

    def select(self, rows: list[int]) -> None:
        width = max((self.lengths[i] for i in rows), default=0)
        index = torch.tensor(rows, dtype=torch.long)
        for layer in self.cache.layers:
            at = index.to(layer.keys.device)
            layer.keys[: len(rows), :, :width] = layer.keys[at, :, :width]
            layer.values[: len(rows), :, :width] = layer.values[at, :, :width]
        self.lengths = [self.lengths[i] for i in rows]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, S] -> logits [B, S, V]: each row's S positions at its own columns."""
        fed = ids.shape[1]
        positions = torch.tensor(self.lengths, device=ids.device)[:, None] + torch.arange(fed, device=ids.device)
        self.width = max(self.lengths) + fed
        self._reserve(len(self.lengths), self.width)
        self.at = positions[:, None, :, None]  # [B, 1, S, 1]: where each new position is written
        mask = torch.arange(self.width, device=ids.device) <= self.at  # [B, 1, S, width]
        if self.attention == "eager":  # eager adds its mask to the scores
            mask = torch.zeros(mask.shape, dtype=self.cache.layers[0].keys.dtype, device=ids.device).masked_fill(
                ~mask, torch.finfo(self.cache.layers[0].keys.dtype).min)
        with _grouped_attention(ids.device.type == "cpu"):
            out = self.lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=self.cache, use_cache=True)
        return out.logits

    def keep(self, kept: list[int]) -> None:
        """Row i keeps the first kept[i] fed positions (the rest are written over next time)."""
        self.lengths = [n + k for n, k in zip(self.lengths, kept)]


@contextmanager
def _grouped_attention(on: bool):
    """transformers' sdpa, given a mask and S > 1 queries, copies K and V once per query head
    (repeat_kv), or with TRANSFORMERS_SDPA_FORCE_GQA calls sdpa's enable_gqa. Here each key/value
    head's G query heads ride in the query dimension instead ([B, H, S, D] -> [B, KV, G*S, D], the
    mask repeated to match), which transformers' own pack_gqa does for one query: the cache is
    read in place, by one plain sdpa call per layer. On a CPU (torch 2.13, 8 rows x 2 queries x
    264 columns) 208 µs per layer against enable_gqa's 445 and repeat_kv's 493; outputs differ
    from enable_gqa's by 4e-7, the fp32 rounding class. Not on a GPU, where sdpa's fused
    kernels take GQA with a mask their own way."""
    if not on:
        yield
        return
    plain = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def grouped(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if attention_mask is None or attention_mask.dtype != torch.bool or kwargs.get("softcap") is not None:
            return plain(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        b, h, s, d = query.shape  # query [B, H, S, D]; key, value [B, KV, width, D]; mask [B, 1, S, width]
        g = h // key.shape[1]  # head h = kv * g + j (repeat_kv's order) -> row j * S + s of head kv
        out = torch.nn.functional.scaled_dot_product_attention(
            query.reshape(b, h // g, g * s, d), key, value, attn_mask=attention_mask.repeat(1, 1, g, 1),
            dropout_p=dropout, scale=scaling)
        return out.view(b, h, s, d).transpose(1, 2).contiguous(), None  # [B, S, H, D], as transformers' sdpa

    ALL_ATTENTION_FUNCTIONS["sdpa"] = grouped  # a local override of the shared registry...
    try:
        yield
    finally:
        del ALL_ATTENTION_FUNCTIONS["sdpa"]  # ...dropped, so the library-wide entry shows through again
        if ALL_ATTENTION_FUNCTIONS["sdpa"] is not plain:  # someone else's local override was there before
            ALL_ATTENTION_FUNCTIONS["sdpa"] = plain
