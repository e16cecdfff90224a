"""The `features` draft's model: one small block that drafts from the target's own hidden
states (EAGLE-1, Li et al. 2024; with fused taps, EAGLE-3's input), its KV cache and its weights file. `specdec distill`
(distill.py) trains it; the draft that runs it in the loop is features_draft.py.

Notation: t_0..t_{L-1} the tokens; f_j the target's final hidden state at position j (what its
LM head reads; it predicts t_{j+1}). At position j the block reads the pair (f_j, t_{j+1}),
fused by `fc`, runs one decoder layer over its own KV cache and outputs a predicted f_{j+1};
the target's LM head (shared, never copied) turns that into a guess for t_{j+2}. As in EAGLE-1
the predicted feature goes straight to the LM head (no extra norm): the block regresses the
post-norm features the head reads.

Taps (EAGLE-3, Li et al. 2025): a block whose config names several of the target's hidden states
(engine/taps.py: low, middle and final layers) reads them side by side at the true positions,
and `fuse` (one linear map, T*H -> H) makes the feature it pairs with the token (`lift`); its own
predictions, at the speculative positions, are H wide already. A block of the final tap alone
has no `fuse`: an EAGLE-1 file reads as before.

Drafting k tokens after t_0..t_{L-1}: feed the true pairs not yet cached (their features came
from the target's last verify forward: handed over by the loop: Draft.reads_features), whose last output gives proposal 1;
then feed (predicted feature, proposal i) to get proposal i+1 (k block calls in all). Only true
pairs stay in the cache: the speculative ones are overwritten next round (a cache written by
position, as in gpt-fast: rollback is a shorter `length`).

Hand-written layer (pre-norm attention + SwiGLU, RoPE), not the target family's layer class:
one code path for every target architecture, a by-position cache with free rollback, and no
per-call mask and cache-object overhead, which is a real share of a one-layer draft's cost.
A reduced vocabulary (the N most frequent target tokens in the training data) cuts the LM-head
cost; proposals map back to target ids and a token outside it is never proposed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specdec_cli.engine import taps
from specdec_cli.engine.taps import ONLY_FINAL
from specdec_cli.errors import SpecdecError

FORMAT = "specdec-features/1"  # safetensors metadata 'format': what this module reads and writes


@dataclass(frozen=True)
class BlockConfig:
    hidden: int  # H: the target's hidden size (features and token embeddings are H wide)
    heads: int  # attention heads; head size H / heads
    intermediate: int  # SwiGLU width
    vocab: int  # N: draft vocabulary (the head's rows), <= the target's vocabulary
    target_vocab: int  # V: the target's vocabulary (ids the draft proposes)
    rope_theta: float = 10000.0
    taps: tuple[int, ...] = ONLY_FINAL  # the target's hidden states it reads (engine/taps.py)

    @property
    def fused(self) -> bool:
        """Whether it reads more than the final hidden state (then `fuse` maps the taps to one)."""
        return tuple(self.taps) != ONLY_FINAL


# ---------------------------------------------------------------------------- the block
def _rope(positions: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [P, dim/2] for integer positions [P]."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)
    angles = positions.float()[:, None] * inv[None]
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., P, d] rotated by its positions' angles (rotate-half RoPE, as Llama)."""
    a, b = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class FeatureBlock(nn.Module):
    """fc(concat(f_j, embed(t_{j+1}))) -> pre-norm attention -> pre-norm SwiGLU -> f̂_{j+1}."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        H, self.cfg = cfg.hidden, cfg
        if H % cfg.heads or (H // cfg.heads) % 2:
            raise ValueError(f"hidden {H} must split into {cfg.heads} heads of even size")
        self.fuse = nn.Linear(len(cfg.taps) * H, H, bias=False) if cfg.fused else None
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.attn_norm = nn.RMSNorm(H, eps=1e-6)
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.o = nn.Linear(H, H, bias=False)
        self.mlp_norm = nn.RMSNorm(H, eps=1e-6)
        self.gate_up = nn.Linear(H, 2 * cfg.intermediate, bias=False)
        self.down = nn.Linear(cfg.intermediate, H, bias=False)

    def lift(self, features: torch.Tensor) -> torch.Tensor:
        """The target's features at true positions [..., T * H] -> the block's [..., H]."""
        return features if self.fuse is None else self.fuse(features)

    def final(self, features: torch.Tensor) -> torch.Tensor:
        """The final hidden state f [..., H] among the taps [..., T * H] (training reads it)."""
        i, H = list(self.cfg.taps).index(taps.FINAL), self.cfg.hidden
        return features[..., i * H:(i + 1) * H]

    def _split(self, x: torch.Tensor):
        """x [B, S, H] -> q, k, v [B, heads, S, d]."""
        B, S, _ = x.shape
        qkv = self.qkv(self.attn_norm(x)).view(B, S, 3, self.cfg.heads, -1)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def _finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Residual after attention (attended [B, heads, S, d]), then the SwiGLU MLP."""
        B, _, S, _ = attended.shape
        h = x + self.o(attended.transpose(1, 2).reshape(B, S, -1))
        gate, up = self.gate_up(self.mlp_norm(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up)

    def step(self, features: torch.Tensor, embeds: torch.Tensor, cache: "BlockCache") -> torch.Tensor:
        """Drafting: features, embeds [S, H] for positions cache.length.. -> f̂ [S, H]; the S
        positions are written into the cache (cache.length is the caller's to advance)."""
        x = self.fc(torch.cat([features, embeds], dim=-1))[None]  # [1, S, H]
        q, k, v = self._split(x)
        start, S = cache.length, x.shape[1]
        cache.reserve(start + S)
        cos, sin = cache.cos[start:start + S], cache.sin[start:start + S]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        cache.k[:, :, start:start + S], cache.v[:, :, start:start + S] = k, v
        keys, values = cache.k[:, :, :start + S], cache.v[:, :, :start + S]
        mask = None
        if S > 1:  # causal within the chunk; every cached position is visible
            mask = torch.arange(start + S, device=x.device)[None] <= torch.arange(start, start + S, device=x.device)[:, None]
        return self._finish(x, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))[0]

    def branch(self, features: torch.Tensor, embeds: torch.Tensor, cache: "BlockCache", past_k: torch.Tensor,
               past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Drafting a tree, one depth at once: m nodes, each the pair (its parent's f̂, its token's
        embedding) [m, H] at position cache.length + a, seeing the cache's true pairs, its own
        ancestors' speculative pairs past_k, past_v [m, heads, a, d] and itself (as `step` would
        on the chain through it). Writes nothing: returns (f̂ [m, H], the nodes' own k and v
        [m, heads, 1, d], for their children)."""
        x = self.fc(torch.cat([features, embeds], dim=-1))[:, None]  # [m, 1, H]
        q, k, v = self._split(x)  # [m, heads, 1, d]
        at = cache.length + past_k.shape[2]
        cache.reserve(at + 1)
        cos, sin = cache.cos[at:at + 1], cache.sin[at:at + 1]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        m = x.shape[0]
        true_k, true_v = (t[:, :, :cache.length].expand(m, -1, -1, -1) for t in (cache.k, cache.v))
        keys, values = torch.cat([true_k, past_k, k], dim=2), torch.cat([true_v, past_v, v], dim=2)
        return self._finish(x, F.scaled_dot_product_attention(q, keys, values))[:, 0], k, v

    def unroll(self, features: torch.Tensor, embeds: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training and evaluation: every position j of a batch drafts `steps` tokens at once,
        exactly as drafting would after the true pairs 0..j.

        features [B, S, T * H]: the taps at j (f_j alone for EAGLE-1); embeds [B, S + steps, H]:
        embed(t_j) (zero past the end).
        Step s at anchor j reads (f̂ of step s-1, or f_j for s = 1; embed(t_{j+s})) at position
        j+s-1 and attends to the true pairs 0..j (step 1's keys) and to its own chain's
        speculative pairs (steps 2..s of anchor j). Returns f̂ [B, S, H] for s = 1..steps.
        """
        B, S, _ = features.shape
        positions = torch.arange(S + steps, device=features.device)
        cos, sin = _rope(positions, self.cfg.hidden // self.cfg.heads, self.cfg.rope_theta)
        causal = torch.ones(S, S, dtype=torch.bool, device=features.device).tril()  # anchor j sees pairs <= j
        outs, chain, h = [], [], self.lift(features)
        for s in range(1, steps + 1):
            x = self.fc(torch.cat([h, embeds[:, s:s + S]], dim=-1))
            q, k, v = self._split(x)
            q, k = _rotate(q, cos[s - 1:s - 1 + S], sin[s - 1:s - 1 + S]), _rotate(k, cos[s - 1:s - 1 + S], sin[s - 1:s - 1 + S])
            if s == 1:
                true_k, true_v = k, v
                attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                chain.append((k, v))
                scale = q.shape[-1] ** -0.5
                scores = (q @ true_k.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # [B, h, S, S]
                own = torch.stack([(q * ck).sum(-1) * scale for ck, _ in chain], dim=-1)  # [B, h, S, s-1]
                p = torch.cat([scores, own], dim=-1).softmax(-1)
                attended = p[..., :S] @ true_v + sum(p[..., S + i, None] * cv for i, (_, cv) in enumerate(chain))
            h = self._finish(x, attended)
            outs.append(h)
        return outs


class BlockCache:
    """The block's keys and values, written by position; `length` true pairs are valid.
    Rolling back is setting `length`; positions past it are overwritten by the next feed."""

    def __init__(self, cfg: BlockConfig, device, dtype, capacity: int = 256):
        self.cfg, self.device, self.dtype, self.length = cfg, device, dtype, 0
        self.k = self.v = torch.empty(1, cfg.heads, 0, cfg.hidden // cfg.heads, device=device, dtype=dtype)
        self.reserve(capacity)

    def reserve(self, n: int) -> None:
        """Room for n positions (doubling, so growth costs O(1) per position)."""
        if n <= self.k.shape[2]:
            return
        cap = max(n, 2 * self.k.shape[2])
        grow = lambda t: torch.cat([t, t.new_zeros(*t.shape[:2], cap - t.shape[2], t.shape[3])], dim=2)
        self.k, self.v = grow(self.k), grow(self.v)
        self.cos, self.sin = _rope(torch.arange(cap, device=self.device), self.cfg.hidden // self.cfg.heads,
                                   self.cfg.rope_theta)


# ---------------------------------------------------------------------------- files
def fingerprint(lm) -> str:
    """sha256 of the target's token-embedding matrix rounded to bfloat16, so fp32 and bf16
    loads of the same weights agree (a float16 load may not)."""
    weight = lm.model.get_input_embeddings().weight.detach()
    data = weight.to("cpu", torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def target_shape(lm) -> tuple[int, int]:
    """(hidden size, vocabulary) of a target: what a draft's weights must fit."""
    weight = lm.model.get_output_embeddings().weight
    return weight.shape[1], weight.shape[0]


def save(path: Path, block: FeatureBlock, vocab_ids: torch.Tensor, meta: dict, dtype=torch.float16) -> None:
    """model.safetensors: the block's weights (stored as `dtype`), `vocab_ids` [N] (draft row ->
    target id), and metadata: format, config, target, fingerprint, and whatever `meta` adds."""
    from safetensors.torch import save_file

    tensors = {name: p.detach().to("cpu", dtype).contiguous() for name, p in block.state_dict().items()}
    tensors["vocab_ids"] = vocab_ids.to("cpu", torch.int32).contiguous()
    metadata = {"format": FORMAT, "config": json.dumps(asdict(block.cfg))}
    metadata.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()})
    save_file(tensors, str(path), metadata=metadata)


def read_header(path: Path) -> dict:
    """The safetensors metadata of a draft file, checked without reading the weights.
    Raises SpecdecError (message without the file name: callers add where it came from)."""
    if not path.is_file():
        raise SpecdecError("no such file" if not path.exists() else "is a directory, not a file")
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= 100_000_000:
                raise ValueError
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        raise SpecdecError("is not a safetensors file (no valid header)") from None
    meta = header.get("__metadata__") or {}
    if meta.get("format") != FORMAT:
        raise SpecdecError(f"is not a specdec features draft (its metadata lacks format: {FORMAT}; "
                           f"make one with specdec distill)")
    return meta


def load(path: Path, lm) -> tuple[FeatureBlock, torch.Tensor, dict]:
    """(block on the target's device and dtype, vocab_ids, metadata) for target `lm`.
    Weights that do not fit this target are a SpecdecError saying what they expected."""
    from safetensors.torch import load_file

    meta = read_header(path)
    try:
        raw = json.loads(meta["config"])
        cfg = BlockConfig(**{**raw, "taps": tuple(raw.get("taps", ONLY_FINAL))})
    except (KeyError, TypeError, ValueError) as e:
        raise SpecdecError(f"metadata 'config' is malformed ({e})") from None
    problem = taps.check(cfg.taps, lm.config.get_text_config(decoder=True).num_hidden_layers)
    if problem:
        raise SpecdecError(f"metadata 'config': {problem}")
    hidden, vocab = target_shape(lm)
    if (cfg.hidden, cfg.target_vocab) != (hidden, vocab):
        raise SpecdecError(f"expects a target with hidden size {cfg.hidden} and vocabulary {cfg.target_vocab} "
                           f"(trained for {meta.get('target', '?')}); this target has hidden size {hidden} and "
                           f"vocabulary {vocab}")
    mine = fingerprint(lm)
    if meta.get("fingerprint") != mine:
        raise SpecdecError(f"was trained for target {meta.get('target', '?')} with embedding fingerprint "
                           f"{str(meta.get('fingerprint'))[:12]}…; this target's is {mine[:12]}… "
                           f"(a features draft fits one target: train one with specdec distill)")
    tensors = load_file(str(path))
    block = FeatureBlock(cfg)
    expected = {name: tuple(p.shape) for name, p in block.state_dict().items()} | {"vocab_ids": (cfg.vocab,)}
    for name, shape in expected.items():
        got = tuple(tensors[name].shape) if name in tensors else None
        if got != shape:
            raise SpecdecError(f"tensor '{name}' has shape {got}, expected {shape}" if got else f"tensor '{name}' is missing")
    vocab_ids = tensors.pop("vocab_ids").long()
    if vocab_ids.min() < 0 or vocab_ids.max() >= vocab:
        raise SpecdecError(f"vocab_ids must be target ids in 0..{vocab - 1}")
    block.load_state_dict({k: v.float() for k, v in tensors.items()})
    weight = lm.model.get_output_embeddings().weight
    block.to(weight.device, weight.dtype).requires_grad_(False).eval()
    return block, vocab_ids.to(weight.device), meta
