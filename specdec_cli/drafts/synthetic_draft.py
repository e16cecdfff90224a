"""The agreement-controlled draft on a real target (kind `synthetic`, synthetic_kind.py), for
benchmarks: the target's own greedy token (read from a greedy run of the same prompt) with
probability `agree` per position, else a wrong one.
"""

from __future__ import annotations

import torch

from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.toy_draft import OracleDraft


class SyntheticDraft(OracleDraft):
    """The agreement-controlled draft on a real target: its oracle is the target's own greedy
    decode of the same prompt, looked up in `references` (filled by a greedy run beforehand,
    so the timed speculative run pays nothing for it). Isolates how the loop's speed scales
    with acceptance."""

    needs_reference = True  # the request's greedy run must come first (pair.needs_reference)

    def __init__(self, references: dict, vocab: int, agree: float, seed: int, device, name: str):
        super().__init__(None, vocab, agree, seed, device, name)  # `right` below is the oracle
        self.references = references

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        ref = self.references.get(tuple(prompt))
        if ref is None:
            raise SpecdecError("synthetic draft: no greedy reference for this prompt (run greedy first)", 1)
        self.start, self.ref = len(prompt), ref

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        # Past the reference's end (its EOS) the target's choice is unknown and the request is
        # over anyway: never propose there, so agreement 1.0 is accepted in full.
        return super().propose(tokens, max(0, min(k, len(self.ref) - (len(tokens) - self.start))))

    def right(self, context: list[int]) -> int:
        """The reference's token after `context`: this draft's own (a batch row's copy reads its own
        request's reference, set by its own begin)."""
        i = len(context) - self.start  # valid while context = prompt + reference prefix
        return self.ref[i] if i < len(self.ref) else 0
