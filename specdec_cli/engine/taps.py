"""Which of a target's hidden states a forward hands back: its *taps*.

A features draft drafts from the target's own hidden states. EAGLE-1 reads the final one (after
the last norm: what the LM head reads); an EAGLE-3-class draft fuses low, middle and final ones.
A tap is a layer count: `n` >= 1 is the residual stream after the first n decoder layers (before
any norm), `FINAL` the final hidden state. A forward asked for taps (t_1, ..., t_T) returns them
side by side, [.., S, T * H], in that order; `()` asks for none. No torch at import (the CLI
reads FINAL).
"""

from __future__ import annotations

from contextlib import contextmanager

FINAL = -1  # the final hidden state, after the last norm
ONLY_FINAL = (FINAL,)  # EAGLE-1: what the LM head reads


def check(taps: tuple[int, ...], layers: int) -> str | None:
    """Why `taps` cannot be read from a target of `layers` decoder layers (None: they can)."""
    if not taps:
        return "no taps"
    bad = [t for t in taps if t != FINAL and not 1 <= t <= layers]
    if bad:
        return f"tap {bad[0]} is not a layer count in 1..{layers} or {FINAL} (the final hidden state)"
    if len(set(taps)) != len(taps):
        return f"taps {list(taps)} repeat one"
    return None


@contextmanager
def tapping(model, taps: tuple[int, ...], store=lambda t: t):
    """Hooks on `model`'s decoder (a transformers causal LM) that keep, for every decoder call while
    the context is open, its hidden states at `taps` side by side [B, S, T * H], through `store`
    (e.g. to the host, in half precision): yields the list they are appended to. The decoder's own
    hook fires after its layers', so it closes each call."""
    import torch

    decoder = model.get_decoder()
    calls, seen = [], {}

    def keep(tap):
        def hook(module, args, out):
            seen[tap] = out[0] if isinstance(out, tuple) else out
        return hook

    def close(module, args, out):
        seen[FINAL] = out[0]
        calls.append(store(torch.cat([seen[t] for t in taps], dim=-1) if len(taps) > 1 else seen[taps[0]]))
        seen.clear()

    hooks = [decoder.layers[t - 1].register_forward_hook(keep(t)) for t in taps if t != FINAL]
    hooks.append(decoder.register_forward_hook(close))
    try:
        yield calls
    finally:
        for hook in hooks:
            hook.remove()
