"""The KV cache the decode loop owns: B >= 1 rows, each at its own length; rollback = lower a length.

`KVCache` serves a transformers target. Each layer keeps K and V in buffers [rows, H, capacity, D]
written in place; row i owns columns 0..length[i]-1, position ids are columns, and a forward's
mask shows query s of row i the columns j <= length[i] + s (and, in a sliding-window layer, only
the last `window` of them). Why not transformers' DynamicCache: it concatenates the whole cache
every forward, and rows that reject different amounts of a verify would leave holes.

Shapes (the forward policy's `shapes`, docs/shapes.md):
  free    a forward is [live rows, d+1] over the columns in use: the least work;
  pinned  every decode-phase forward is [rows, W] over all `capacity` columns: the round's tokens,
          then padding (outputs dropped, cache entries overwritten by the next forward), rows
          that are not live padded too. One shape means the same kernels every time, so a
          position's logits are bitwise the same decoded alone (greedy) or inside a verify.
Under decoding.compile the buffer's capacity is fixed in free shapes too (`fixed`; capacity_for),
so each forward width is one static shape for the compiled model (kernels.compiled).
`SerialCache` serves any other target behind the small model interface (the toy, plan's replay):
a cache per row, rows fed one by one.
"""

from __future__ import annotations

import copy
import weakref

import torch
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from specdec_cli.errors import SpecdecError
from specdec_cli.engine.attention import Detour, grouped_attention
from specdec_cli.engine.trees import layout

PAD = 0  # the id that fills a pinned forward's unused slots (any id will do: its outputs are dropped)


def capacity_for(lm, columns: int) -> int:
    """The KV capacity a request needing `columns` gets: the target's to say (HFLM.reserve: a
    compiled target's capacities are shared steps); any other model gets `columns`."""
    reserve = getattr(type(lm), "reserve", None)
    return lm.reserve(columns) if reserve is not None else columns


def to_device(values: list, device) -> torch.Tensor:
    """Host ints as a long tensor on `device`. On a GPU through pinned memory, asynchronously: a
    plain copy from pageable memory synchronizes, and a round allows itself one host sync."""
    host = torch.tensor(values, dtype=torch.long)
    if torch.device(device).type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def prefill(lm, cache, prompt: list[int], features: tuple[int, ...] = ()):
    """Cache every prompt token but the last (the first round feeds it). Returns the forwards
    made; with `features` (taps), (forwards, the prefill's hidden states [L-1, T * H] or None)."""
    if len(prompt) < 2:
        return (0, None) if features else 0
    ids = to_device([prompt[:-1]], lm.device)
    if not features:
        lm.forward(ids, cache, keep=1)  # logits unused
        return 1
    return 1, lm.forward(ids, cache, keep=1, features=features)[1]


class SerialCache:
    """Any target behind the small model interface: one cache per row, rows fed one by one.
    Pinned (`width` W): each row's forward is padded to W tokens, as KVCache pads."""

    @property
    def trees(self) -> bool:
        """Rows are fed one by one through the model's own forward, which takes no tree mask;
        only a target that lays a tree out itself (`trees`: plan's replay, by depth) takes trees."""
        return getattr(self.target, "trees", False)

    def __init__(self, target, width: int | None = None):
        self.target, self.width, self.caches, self.fed = target, width, [], 0

    def add(self, prompt: list[int], prefix=None, features: tuple[int, ...] = ()):
        """A new last row holding prompt[:-1] (a copy of `prefix` when given); returns the
        forwards made (with `features`, and the prefill's hidden states, as prefill)."""
        if prefix is not None:
            self.caches.append(copy.deepcopy(prefix))
            return (0, None) if features else 0
        self.caches.append(self.target.new_cache())
        return prefill(self.target, self.caches[-1], prompt, features)

    def select(self, rows: list[int]) -> None:
        self.caches = [self.caches[i] for i in rows]

    def warm(self, widths) -> None:
        """Nothing to compile here (KVCache.warm)."""

    def forward(self, ids: torch.Tensor, features: tuple[int, ...] = (), trees: list | None = None):
        """ids [B, S] -> logits [B, S, V]; appends S positions (W when pinned) to every row.
        With `features` (taps), (logits, hidden states [B, S, T * H]). `trees` only where self.trees."""
        if trees is not None and any(trees) and not self.trees:
            raise SpecdecError("token trees need specdec's KV cache (a transformers target)")
        s = ids.shape[1]
        if self.width is not None:
            ids = torch.cat([ids, ids.new_full((ids.shape[0], self.width - s), PAD)], 1)
        self.fed = ids.shape[1]
        tree = [{"tree": t} if t else {} for t in trees] if trees else [{}] * len(self.caches)
        if not features:  # the toy's and a replay's forwards know no features
            return torch.stack([self.target.forward(ids[i : i + 1], c, **tree[i])[:s] for i, c in enumerate(self.caches)])
        outs = [self.target.forward(ids[i : i + 1], c, features=features, **tree[i]) for i, c in enumerate(self.caches)]
        return torch.stack([o[0][:s] for o in outs]), torch.stack([o[1][:s] for o in outs])

    def keep(self, kept: list[int], paths: list[list[int]] | None = None) -> None:
        """Row i keeps the first kept[i] of the positions just fed (chains only: `paths` are 0..n)."""
        for cache, n in zip(self.caches, kept):
            cache.crop(n - self.fed)


class KVLayer(DynamicLayer):
    """One decoder layer of KVCache' cache: K and V buffers [rows, H, capacity, D] written in
    place. `update` writes each row's new positions at that row's own columns (owner.at) and
    hands attention the first owner.columns columns: a view, no copy."""

    def __init__(self, owner: KVCache, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.owner, self.keys, self.values, self.is_initialized = owner, keys, values, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        b, width = key_states.shape[0], self.owner.columns
        at = self.owner.at.to(key_states.device).expand_as(key_states)  # device_map: auto spreads the layers
        self.keys[:b].scatter_(2, at, key_states)
        self.values[:b].scatter_(2, at, value_states)
        return self.keys[:b, :, :width], self.values[:b, :, :width]

    def get_seq_length(self) -> int:
        return self.owner.columns


class KVCache:
    """An HFLM's rows (see the module doc): add, select, forward [B, S], keep."""

    COLUMNS = 64  # free shapes: the buffers' first width; they double when a forward needs more

    def __init__(self, lm, card_name: str = "the target", rows: int = 1, width: int | None = None,
                 capacity: int | None = None, decoder: bool = True):
        self.lm, self.columns, self.lengths, self.fed = lm, 0, [], 0
        self.decoder = decoder  # False: transformers' own forward even where lm.decoder runs (to compare them)
        self.width, self.rows = width, rows  # pinned: every forward [rows, width] over `capacity` columns
        # fixed: every forward over all `capacity` columns (pinned, or a compiled target: one capacity per graph)
        self.fixed = width is not None or lm.compiled
        problem = unsupported(lm)
        if problem:
            raise SpecdecError(f"{card_name}: {problem}")
        self.attention = lm.config._attn_implementation
        probe = _probe(lm)
        text = lm.config.get_text_config(decoder=True)
        self.window = getattr(text, "sliding_window", None)
        kinds = {type(layer) is DynamicSlidingWindowLayer for layer in probe.layers}
        self.sliding = "mixed" if len(kinds) == 2 else "all" if True in kinds else None  # mixed: a mask per layer type
        first = capacity if self.fixed else self.COLUMNS
        self.cache = lm.new_cache()
        self.cache.layers = [KVLayer(self, *(t.new_zeros(rows, t.shape[1], first, t.shape[3])
                                              for t in (layer.keys, layer.values))) for layer in probe.layers]

    @property
    def capacity(self) -> int:
        return self.cache.layers[0].keys.shape[2]

    def _reserve(self, rows: int, width: int) -> None:
        """Buffers for at least `rows` rows and `width` columns (doubling, old contents kept)."""
        have = self.cache.layers[0].keys
        if rows <= have.shape[0] and width <= have.shape[2]:
            return
        if self.fixed:  # one capacity, fixed when the request's size was known
            raise SpecdecError(f"fixed-capacity KV buffer of {have.shape[0]} rows x {have.shape[2]} columns is too small "
                               f"for {rows} rows x {width} columns")
        rows, width = max(rows, have.shape[0]), max(width, 2 * have.shape[2])
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                new = old.new_zeros(rows, old.shape[1], width, old.shape[3])
                new[: old.shape[0], :, : old.shape[2]] = old
                setattr(layer, name, new)

    def add(self, prompt: list[int], prefix=None, features: tuple[int, ...] = ()):
        """A new last row holding prompt[:-1]: prefilled alone, the same way in every mode (or
        copied from `prefix`, a cache holding that prefill). Returns the forwards made (with
        `features`, and the prefill's hidden states, as prefill)."""
        if prefix is not None:
            alone, made = prefix, (0, None)
        else:
            alone = self.lm.new_cache()
            made = prefill(self.lm, alone, prompt, features) if features else (prefill(self.lm, alone, prompt), None)
        row, n = len(self.lengths), len(prompt) - 1
        self._reserve(row + 1, n)
        if n:
            for layer, own in zip(self.cache.layers, alone.layers):
                m = own.keys.shape[2]  # a sliding layer may hold only the last positions
                layer.keys[row, :, n - m : n], layer.values[row, :, n - m : n] = own.keys[0], own.values[0]
        self.lengths.append(n)
        return made if features else made[0]

    def warm(self, widths) -> None:
        """Under decoding.compile, run each forward shape [rows, n] the loop will take once now
        (pinned: n = W; free: n in `widths`), padding only: outputs dropped, the columns written
        are overwritten later. So compiles fall before any request's clock starts. A shape the
        target has run is skipped (HFLM.warm); without compile, nothing to do."""
        for n in [self.width] if self.width is not None else widths:
            self.lm.warm((self.rows, n, self.capacity), lambda n=n: self._pad_forward(n))

    def _pad_forward(self, n: int) -> None:
        lengths, self.lengths = self.lengths, [0] * self.rows
        self.forward(torch.zeros(self.rows, n, dtype=torch.long, device=self.lm.device))
        self.lengths = lengths

    def select(self, rows: list[int]) -> None:
        """Keep these rows, in this order, as rows 0..len(rows)-1."""
        if rows == list(range(len(rows))):  # the first rows stay where they are: nothing to move
            self.lengths = self.lengths[: len(rows)]
            return
        width = max((self.lengths[i] for i in rows), default=0)
        for layer in self.cache.layers:
            at = to_device(rows, layer.keys.device)
            layer.keys[: len(rows), :, :width] = layer.keys[at, :, :width]
            layer.values[: len(rows), :, :width] = layer.values[at, :, :width]
        self.lengths = [self.lengths[i] for i in rows]

    @property
    def trees(self) -> bool:
        """Whether a forward may hold token trees (engine/trees.py): not in sliding-window layers,
        whose window counts columns, where a tree slot's position is its depth; under pinned
        shapes only where attention.grouped_attention runs (sdpa on a CPU), which gives a slot
        off the first chain the K/V layout a chain would (Detour: bitwise a plain step)."""
        return self.sliding is None and (self.width is None or pinned_trees(self.lm))

    def forward(self, ids: torch.Tensor, features: tuple[int, ...] = (), trees: list | None = None):
        """ids [B, S] -> logits [B, S, V]: each row's S positions at its own columns (pinned: fed
        as [rows, W], padded). With `features` (taps), (logits, hidden states [B, S, T * H]). `trees`: row
        i's slots form the tree trees[i] (parents, engine/trees.py; None: a chain): slot s sits
        at position length + depth(s) and sees the row's columns plus its own ancestors."""
        b, s = ids.shape
        lengths = self.lengths
        wide = self.lm.policy.width(s) if self.width is None and self.rows == 1 and not self.fixed else s
        if wide > s:  # free shapes, one row: the cost profile measured a wider forward cheaper (padded)
            ids = torch.cat([ids, ids.new_full((b, wide - s), PAD)], 1)
        if self.width is not None:
            ids = torch.cat([ids, ids.new_full((b, self.width - s), PAD)], 1)
            ids = torch.cat([ids, ids.new_full((self.rows - b, self.width), PAD)])
            lengths = lengths + [0] * (self.rows - b)  # rows not live: padding at their own columns
        self.fed = fed = ids.shape[1]
        start = to_device(lengths, ids.device)[:, None]  # [B, 1]
        positions = start + torch.arange(fed, device=ids.device)  # [B, S]: a chain's, and the columns written
        self.columns = self.capacity if self.fixed else max(lengths) + fed
        self._reserve(len(lengths), max(lengths) + fed)
        self.at = positions[:, None, :, None]  # [B, 1, S, 1]: where each new position is written
        column = torch.arange(self.columns, device=ids.device)
        detours = []
        if trees is None or not any(trees):
            visible = column <= self.at  # [B, 1, S, columns]
        else:
            positions, visible, detours = self._tree(trees, lengths, start, column, fed)
        mask = self._mask(visible)
        if self.sliding:  # a sliding layer sees only the last `window` columns
            window = self._mask(visible & (column > self.at - self.window))
            mask = {"full_attention": mask, "sliding_attention": window} if self.sliding == "mixed" else window
        decoder = self.lm.decoder if self.decoder and not self.sliding else None
        if decoder is not None:  # the same logits, without transformers' framework (decoder.py)
            layers = self.cache.layers
            # every row writing the same columns: a slice (an int; a compiled graph takes the tensor,
            # since an int that changes every step would trace it again)
            at = lengths[0] if len(set(lengths)) == 1 and not self.lm.compiled else self.at
            out = decoder(ids, [t.keys for t in layers], [t.values for t in layers], at, self.columns, visible,
                          positions, detours, features)
        else:
            with grouped_attention(ids.device.type == "cpu", detours):
                out = self.lm.run(ids, self.cache, fixed=self.fixed, features=features,
                                  attention_mask=mask, position_ids=positions)
        return (out[0][:b, :s], out[1][:b, :s]) if features else out[:b, :s]

    def _tree(self, trees: list, lengths: list[int], start: torch.Tensor, column: torch.Tensor, fed: int):
        """(positions [B, S], visible [B, 1, S, columns], detours) when rows hold token trees: each
        row's columns before `start`, then the slots family marks (itself and its ancestors).
        Pinned: a Detour for every slot off its row's first chain (attention.py: bitwise)."""
        if not self.trees:
            raise SpecdecError("token trees need a transformers target without sliding-window layers, and under "
                               "pinned shapes sdpa attention on a CPU")
        depth, family = layout(list(trees) + [None] * (len(lengths) - len(trees)), fed)
        detours = [] if self.width is None else [
            Detour.of(row, slot, [n + a for a in family[row, slot].nonzero().flatten().tolist()], n, start.device)
            for row, (n, parents) in enumerate(zip(lengths, trees)) for slot in range(1, len(parents or ()) + 1)
            if not family[row, slot, : int(depth[row, slot]) + 1].all()]  # its ancestors are not slots 0..depth
        depth, family = depth.to(start.device), family.to(start.device)
        rel = column - start  # [B, columns]: the column's slot in this forward (< 0: the prefix)
        inside = family.gather(2, rel.clamp(0, fed - 1)[:, None, :].expand(-1, fed, -1))  # [B, S, columns]
        visible = (rel < 0)[:, None, :] | (inside & (rel < fed)[:, None, :])
        return start + depth, visible[:, None], detours

    def _mask(self, visible: torch.Tensor) -> torch.Tensor:
        if self.attention != "eager":
            return visible
        dtype = self.cache.layers[0].keys.dtype  # eager adds its mask to the scores
        return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill(~visible, torch.finfo(dtype).min)

    def keep(self, kept: list[int], paths: list[list[int]] | None = None) -> None:
        """Row i keeps the first kept[i] fed positions (the rest are written over next time); with
        `paths`, the fed slots paths[i][:kept[i]] (a tree's kept path, by depth), moved to the
        first columns where they are not there already."""
        for i, (n, path) in enumerate(zip(self.lengths, paths or [])):
            slots = path[: kept[i]]
            if slots != list(range(len(slots))):
                src, dst = [n + j for j in slots], list(range(n, n + len(slots)))  # host lists: any layer's device
                for layer in self.cache.layers:
                    layer.keys[i, :, dst], layer.values[i, :, dst] = layer.keys[i, :, src], layer.values[i, :, src]
        self.lengths = [n + k for n, k in zip(self.lengths, kept)]


_PROBES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _probe(lm):
    """A cache holding one position, from one 1-token forward: each layer's K/V shape, dtype and
    device. Made once per model (and again if its dtype or device changes), not once per request."""
    key = (lm.model.dtype, lm.device)
    if _PROBES.get(lm, (None,))[0] != key:
        probe = lm.new_cache()
        lm.forward(torch.zeros(1, 1, dtype=torch.long, device=lm.device), probe)
        _PROBES[lm] = (key, probe)
    return _PROBES[lm][1]


def pinned_trees(lm) -> bool:
    """Whether token trees stay bitwise under pinned shapes for this target: its attention is
    sdpa on a CPU, where attention.grouped_attention detours off-chain slots (not a GPU's fused
    kernels, not eager attention, not a compiled forward, whose graph holds no detour)."""
    return getattr(lm, "config", None) is not None and lm.config._attn_implementation == "sdpa" \
        and lm.device.type == "cpu" and not lm.compiled


def unsupported(lm) -> str | None:
    """Why KVCache cannot hold this transformers model's cache (None: it can)."""
    attention = lm.config._attn_implementation
    if attention not in ("sdpa", "eager"):
        return f"attention {attention!r} takes no per-row mask here (specdec's KV cache runs sdpa or eager attention)"
    odd = sorted({type(layer).__name__ for layer in lm.new_cache().layers
                  if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer)})
    if odd:
        return (f"the cache has {', '.join(odd)} layers (neither full nor sliding-window attention), "
                "which specdec's KV cache cannot hold")
    return None


def cache_for(target, card_name: str = "the target", rows: int = 1, width: int | None = None,
              capacity: int | None = None):
    """The loop's cache for `target`: KVCache for a transformers model, SerialCache otherwise (and
    for a transformers model KVCache cannot hold, one request at a time in free shapes: its own
    cache, rolled back with crop). `width` W pins every forward to [rows, W] over `capacity`
    columns (None: free shapes)."""
    from specdec_cli.engine.models import HFLM

    if not isinstance(target, HFLM):
        return SerialCache(target, width)
    problem = unsupported(target)
    if problem and rows == 1 and width is None:
        return SerialCache(target, width)
    if problem and rows > 1:
        raise SpecdecError(f"--batch: {card_name}: {problem}; use --batch 1")
    return KVCache(target, card_name, rows, width, capacity)
