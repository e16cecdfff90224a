"""Draft kind `synthetic`: the agreement-controlled draft on a real target, for benchmarks
(drafts/synthetic.py).

    draft: {kind: synthetic, agree: 0.7, seed: 0}
Proposes the target's own greedy token (read from a greedy run of the same prompt) with
probability `agree` per position, else a wrong one: it isolates how the loop's speed scales
with acceptance. specdec only: no engine or peer runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_cli.drafts.registry import Kind
from specdec_cli.drafts.toy_kind import AGREEMENT

if TYPE_CHECKING:
    from specdec_cli.drafts.synthetic_draft import SyntheticDraft


class Synthetic(Kind):
    name = "synthetic"
    fields = AGREEMENT
    why_not = "a benchmark draft that copies the target's own output"

    @property
    def draft(self) -> type[SyntheticDraft]:
        from specdec_cli.drafts.synthetic_draft import SyntheticDraft

        return SyntheticDraft

    def detail(self, spec) -> str:
        return f"agree={spec.agree}"

    def build(self, spec, pair, name: str) -> SyntheticDraft:
        target = pair.target
        return self.draft(pair.references, target.vocab_size, spec.agree, spec.seed, target.device, name)
