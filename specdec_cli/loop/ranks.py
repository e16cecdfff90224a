"""Acceptance by depth and rank in token trees, learned online, and the tokens a tree of d nodes
is worth (Sequoia's measure; docs/trees.md).

a(j, r) is the chance that the rank-r child (0: the draft's likeliest, as drafts lay siblings out
best first) of the kept node at depth j - 1 is the target's token, given that ranks 0..r-1 were not.
A tree's node then lies on the kept path with its parent's chance times its own rank's, after its
elder siblings missed; the tokens a round emits are 1 (the target's) plus the sum of those chances.
The best tree of d nodes under a(j, r) takes the d likeliest nodes, a node only after its parent
and its elder sibling (`expected`): what the cost schedule weighs against the verify's width when
it picks a tree's size, where a chain's estimate would price its siblings at nothing.
"""

from __future__ import annotations

import heapq


class Ranks:
    """a(j, r) for one context key: Beta pseudo-counts around a prior plus observed counts that
    decay by `decay` per round (as schedule.Acceptance). A rate not yet seen borrows the one a
    depth above (depth 1: the draft's prior, SIBLING times less for each rank below the first)."""

    SIBLING = 0.5  # a younger sibling's prior, relative to its elder's (before any evidence)

    def __init__(self, prior: float, weight: float = 2.0, decay: float = 0.97):
        self.prior, self.weight, self.decay = prior, weight, decay
        self.reached: dict[tuple[int, int], float] = {}  # (depth, rank) -> rounds it was tried
        self.kept: dict[tuple[int, int], float] = {}  # of those, rounds it was the target's token

    def rate(self, j: int, r: int) -> float:
        """a(j, r), j >= 1, r >= 0."""
        prior = self.prior * self.SIBLING ** r if j == 1 else self.rate(j - 1, r)
        reached, kept = self.reached.get((j, r), 0.0), self.kept.get((j, r), 0.0)
        return (kept + prior * self.weight) / (reached + self.weight)

    def observe(self, parents: tuple[int, ...], proposed: list[int], kept: list[int]) -> None:
        """One round: the tree (parents per slot, engine/trees.py), its tokens, and the tokens the
        loop kept from it (the accepted path, by depth). At each depth along the path the children
        of the kept node are tried in rank order (their slot order) until one is the target's."""
        self.reached = {key: x * self.decay for key, x in self.reached.items()}
        self.kept = {key: x * self.decay for key, x in self.kept.items()}
        node = 0
        for j in range(1, len(kept) + 2):
            children = [slot for slot, parent in enumerate(parents, 1) if parent == node]
            hit = None
            for r, slot in enumerate(children):
                self.reached[(j, r)] = self.reached.get((j, r), 0.0) + 1
                if j <= len(kept) and proposed[slot - 1] == kept[j - 1]:
                    self.kept[(j, r)] = self.kept.get((j, r), 0.0) + 1
                    hit = slot
                    break
            if hit is None:
                return
            node = hit

    def expected(self, d: int) -> float:
        """Tokens a round emits with the best tree of d nodes: 1 + the d largest chances of lying on
        the kept path, a node taken only after its parent and its elder sibling (a chain is
        1 + α_1 + α_1·α_2 + … when every younger sibling's rate is 0)."""
        total, taken = 1.0, 0
        # (-chance, depth, rank, base): base is the parent's chance times the chance every elder sibling missed
        frontier = [(-self.rate(1, 0), 1, 0, 1.0)]
        while frontier and taken < d:
            negative, j, r, missed = heapq.heappop(frontier)
            chance = -negative
            total, taken = total + chance, taken + 1
            heapq.heappush(frontier, (-chance * self.rate(j + 1, 0), j + 1, 0, chance))  # its first child
            missed *= 1 - self.rate(j, r)  # its younger sibling: the same parent, this one missed
            heapq.heappush(frontier, (-missed * self.rate(j, r + 1), j, r + 1, missed))
        return total
