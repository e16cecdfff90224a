"""Token trees: a round's proposals as a tree whose root is the last token (docs/trees.md).

A verify feeds S = d + 1 slots: slot 0 is the row's last token, slot i >= 1 a proposed token
whose parent is slot parents[i - 1] < i. Slot s sits at position prefix + depth(s) and sees the
prefix plus its own ancestors; the target's token after slot s is judged against s's children.
A chain of d is the tree parents = (0, 1, ..., d - 1): every loop path runs through here alike.
Slots come in an order where the most likely path is the first chain (slots 1..depth), so a
round that keeps it moves no K/V (KVCache.keep).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_cli.engine.trees import ancestry, chain, depths


@dataclass(frozen=True)
class Proposal:
    """One row's proposal: tokens [d] on the device, the draft's q [d, V'] (None: deterministic)
    and each token's parent slot (None: a chain)."""

    tokens: torch.Tensor
    q: torch.Tensor | None = None
    parents: tuple[int, ...] | None = None

    @classmethod
    def tree(cls, draft, tokens: list[int], d: int) -> Proposal:
        """A draft's token tree of at most d tokens (drafts that declare `trees`)."""
        ids, parents = draft.propose_tree(tokens, d)
        return cls(ids, parents=parents)

    @property
    def d(self) -> int:
        return self.tokens.shape[0]

    @property
    def depth(self) -> int | None:
        """A tree's longest path (None: a chain, or nothing proposed)."""
        return max(depths(self.parents)) if self.parents else None

    @property
    def shape(self) -> tuple[int, ...]:
        return chain(self.d) if self.parents is None else self.parents


def check(parents: tuple[int, ...]) -> None:
    """A tree's parents come before their children (the slot order every layout relies on)."""
    for i, p in enumerate(parents, 1):
        if not 0 <= p < i:
            raise ValueError(f"slot {i}'s parent {p} does not come before it")


def walk(choice: torch.Tensor, proposal: Proposal) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The path the target agrees with, on the device (no host sync). choice [S]: the target's
    token after each slot (its argmax, or a draw from its p). A slot is kept when its token is the
    target's choice after its parent and its parent is kept; the deepest kept slot ends the path.
    Returns (accepted n: 0-dim, emitted [S]: choice along the path, the correction or bonus last,
    path [S]: the kept slots by depth, first n + 1 meaningful)."""
    device = choice.device
    parents = proposal.shape
    s = len(parents) + 1
    if not proposal.parents:  # a chain (or nothing proposed): the leading run of matches
        n = (proposal.tokens == choice[: s - 1]).int().cumprod(0).sum()
        return n, choice, torch.arange(s, device=device)
    family = ancestry(parents).to(device)  # [S, S]
    depth = torch.tensor(depths(parents), device=device)
    match = torch.cat([torch.ones(1, dtype=torch.bool, device=device),
                       proposal.tokens == choice[torch.tensor(parents, device=device)]])  # [S]
    kept = ~(family & ~match).any(-1)  # every ancestor-or-self matched
    end = torch.where(kept, depth, -1).argmax()  # siblings are distinct: one kept path
    path = torch.where(family[end], depth, s).argsort(stable=True)  # its slots by depth, first
    return depth[end], choice[path], path


def comb(chain: torch.Tensor, logp: torch.Tensor, k: int, ids: torch.Tensor, width: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """(tokens, parents): the k nodes of highest cumulative log-probability among the chain's
    tokens (chain [D], the draft's argmax at each depth; logp [D, N] its log-probabilities over
    the draft vocabulary, `ids` mapping a row to a target id) and, at each depth, the next
    width - 1 tokens beside it as leaves. A chain node scores at least its children do, so the
    kept chain is a prefix and every kept leaf's parent is kept; it is laid out first (slots
    1..c), the leaves after it (a leaf at depth j hangs on slot j)."""
    top = logp.topk(min(width, logp.shape[1]), -1)
    first = logp.argmax(-1)  # the rows the chain took (argmax's tie-break, not topk's)
    picked = logp.gather(1, first[:, None])[:, 0].tolist()
    values, rows, first = top.values.tolist(), top.indices.tolist(), first.tolist()  # to the host
    nodes, run = [], 0.0  # (score, depth, rank, row): rank 0 is the chain's
    for j in range(len(first)):
        nodes += [(run + v, j, 1, r) for v, r in zip(values[j], rows[j]) if r != first[j]][: width - 1]
        run += picked[j]
        nodes.append((run, j, 0, first[j]))
    kept = sorted(nodes, key=lambda n: (-n[0], n[1], n[2]))[:k]
    depth = sum(1 for n in kept if n[2] == 0)
    leaves = [n for n in kept if n[2] == 1]
    tokens = torch.cat([chain[:depth], ids[torch.tensor([n[3] for n in leaves], dtype=torch.long, device=ids.device)]])
    return tokens, tuple(range(depth)) + tuple(n[1] for n in leaves)


def settle(nodes: list[tuple[float, int, int, int]], k: int) -> tuple[list[int], tuple[int, ...]]:
    """(tokens, parents) of the k best of a grown tree's candidate nodes (score, parent node or -1
    for the root, token, depth), a node scoring at most its parent (a cumulative log-probability),
    ties to the shallower: the kept set holds every kept node's parent. Laid out with the best
    chain first (from the root, each kept node's best kept child: slots 1..c), then the rest by
    depth, best first, so parents come before children."""
    kept = sorted(range(len(nodes)), key=lambda i: (-nodes[i][0], nodes[i][3]))[:k]
    best: dict[int, int] = {}
    for i in kept:  # best first: the first child seen is the best
        best.setdefault(nodes[i][1], i)
    chain, at = [], -1
    while at in best:
        at = best[at]
        chain.append(at)
    on = set(chain)
    slots = chain + sorted((i for i in kept if i not in on), key=lambda i: (nodes[i][3], -nodes[i][0]))
    slot = {-1: 0} | {node: s for s, node in enumerate(slots, 1)}
    return [nodes[i][2] for i in slots], tuple(slot[nodes[i][1]] for i in slots)


def graft(first: list[int], ids: list[int], parents: tuple[int, ...], k: int) -> tuple[list[int], tuple[int, ...]]:
    """(tokens, parents): the chain `first` laid out first (slots 1..len(first)), then the tree
    (ids, parents) merged in by path (a node whose path is already there is that node) in the
    tree's order while there is room: at most k nodes. A node left out leaves out its subtree."""
    out, up, slot_of = [], [], {(): 0}  # slot_of: a path of tokens from the root -> its slot

    def add(path: tuple[int, ...]) -> bool:
        if path not in slot_of:
            if len(out) == k:
                return False
            out.append(path[-1])
            up.append(slot_of[path[:-1]])
            slot_of[path] = len(out)
        return True

    for depth in range(1, len(first) + 1):
        add(tuple(first[:depth]))
    path_at = {0: ()}  # the tree's slot -> its path
    for slot, (token, parent) in enumerate(zip(ids, parents), 1):
        if parent in path_at and add((*path_at[parent], token)):
            path_at[slot] = (*path_at[parent], token)
    return out, tuple(up)
