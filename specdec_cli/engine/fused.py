"""Linear layers that read one input (a layer's q, k and v projections, an MLP's gate and up)
computed as one matmul: one call streams their weights together and pays one call's overhead.
`FUSED` names them; `Shared` serves transformers' forward, which calls the layers one after
another on the same input, each its part of one product (quantize.RowInt8Fused in int8,
kernels.PackedGroup for oneDNN's prepacked weights)."""

from __future__ import annotations

from typing import Callable, Iterator

import torch

FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # projections of one input, by name


def groups(parent: torch.nn.Module, takes: Callable[[object], bool]) -> Iterator[tuple[tuple[str, ...], list]]:
    """(names, layers) for each FUSED group among `parent`'s children: every one taken by
    `takes`, all of one input width, dtype and device (their weights can be joined)."""
    for names in FUSED:
        layers = [getattr(parent, name, None) for name in names]
        if all(takes(m) for m in layers) and len(
                {(m.in_features, m.weight.dtype, m.weight.device) for m in layers}) == 1:
            yield names, layers


class Shared:
    """A product of several layers: the subclass's `forward(x)` gives their outputs side by side,
    `split(x)` every part's, `part(x, i)` part i's."""

    sizes: list[int]  # each part's output features, in order
    _last: tuple[torch.Tensor, list[torch.Tensor], set[int]] | None = None

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every part's output for `x`, in order (views of one product)."""
        return list(self.forward(x).split(self.sizes, -1))

    def part(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """Part i's output for `x`: the first part asked for computes them all, the others take
        theirs, and the product is let go once every part has taken its own (any other call
        computes anew)."""
        if self._last is None or self._last[0] is not x or i in self._last[2]:
            self._last = (x, self.split(x), set())
        _, outputs, taken = self._last
        taken.add(i)
        if len(taken) == len(self.sizes):
            self._last = None
        return outputs[i]
