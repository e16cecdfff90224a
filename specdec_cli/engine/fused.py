"""Linear layers that read one input (a layer's q, k and v projections, an MLP's gate and up)
computed as one matmul: one call streams their weights together and pays one call's overhead.
`FUSED` names them; `Shared` serves transformers' forward, which calls the layers one after
another on the same input, each its part of one product (quantize.RowInt8Fused in int8,
kernels.PackedGroup for oneDNN's prepacked weights)."""

from __future__ import annotations

import torch

FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # projections of one input, by name


class Shared:
    """A product of several layers: `split(x)` gives every part's output, `part(x, i)` part i's."""

    sizes: list[int]  # each part's output features, in order
    _last: tuple[torch.Tensor, list[torch.Tensor], set[int]] | None = None

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError

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
