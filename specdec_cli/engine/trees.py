"""A token tree's layout in a verify forward (loop/tree.py has the tree itself): which slots each
slot sees and at which position it sits. Slot 0 is the root (the row's last token); slot i >= 1
has parent slot parents[i - 1] < i. A chain is parents = (0, 1, ..., d - 1)."""

from __future__ import annotations

import torch


def chain(d: int) -> tuple[int, ...]:
    """The parents of a chain of d proposals."""
    return tuple(range(d))


def depths(parents: tuple[int, ...]) -> list[int]:
    """Each slot's depth, the root's 0 included: [S]."""
    out = [0]
    for p in parents:
        out.append(out[p] + 1)
    return out


def ancestry(parents: tuple[int, ...]) -> torch.Tensor:
    """[S, S] bool: row s marks s and every ancestor of s, the root included."""
    s = len(parents) + 1
    rows = torch.zeros(s, s, dtype=torch.bool)
    rows[0, 0] = True
    for i, p in enumerate(parents, 1):
        rows[i] = rows[p]
        rows[i, i] = True
    return rows


def layout(rows: list[tuple[int, ...] | None], fed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(depth [B, fed], family [B, fed, fed]) for a forward of `fed` slots per row: rows[i] is
    row i's tree (None, or rows past the list: a chain); slots past a tree (padding) continue it
    as a chain from its last slot, so they see it all and their outputs are dropped anyway.
    Every row of `rows` is given (None for a chain)."""
    depth, family = [], []
    for parents in rows:
        parents = tuple(parents or ())
        full = parents + tuple(range(len(parents), fed - 1))
        depth.append(torch.tensor(depths(full)))
        family.append(ancestry(full))
    return torch.stack(depth).to(device), torch.stack(family).to(device)
