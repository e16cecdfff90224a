"""Draft kind `toy`: the agreement-controlled draft on the toy target, for tests and demos
(drafts/toy.py).

    draft: {kind: toy, agree: 0.7, seed: 0}
Proposes the toy target's own greedy token with probability `agree` per position, else a
wrong one, reproducibly from `seed`. specdec only: no engine or peer runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_cli.checks import integer, probability
from specdec_cli.drafts.registry import Field, Kind

if TYPE_CHECKING:
    from specdec_cli.drafts.toy_draft import OracleDraft


AGREEMENT = (
    Field("agree", probability, required=True),  # per-token agreement with the target
    Field("seed", integer(0, 2**63 - 1), 0),  # reproducible agreement draws
)


class Toy(Kind):
    name = "toy"
    target = "toy"
    fields = AGREEMENT
    why_not = "specdec's built-in test draft"

    @property
    def draft(self) -> type[OracleDraft]:
        from specdec_cli.drafts.toy_draft import OracleDraft

        return OracleDraft

    def detail(self, spec) -> str:
        return f"agree={spec.agree}"

    def build(self, spec, pair, name: str) -> OracleDraft:
        target = pair.target
        return self.draft(target.greedy_next, target.vocab_size, spec.agree, spec.seed, target.device, name)
