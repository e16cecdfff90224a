"""int8 for a draft model: dynamically quantized linear layers (the target always verifies in its
own dtype, so an approximate draft costs acceptance, never exactness)."""

from __future__ import annotations

import torch

from specdec_cli.errors import SpecdecError


def quantize_int8(lm):
    """`lm` with its nn.Linear layers (the LM head included) replaced, in place, by dynamically
    quantized int8 layers: int8 weights with one scale per output row, activations quantized on
    each call. A decode step then reads about half the weight bytes of float32 and uses the
    CPU's int8 dot products: faster, and approximate, so only for a draft (the target verifies
    every token in its own dtype). A tied embedding stays float (a lookup, not a matmul).
    CPU only; `lm` must be float32.

    The MLP's down projection stays float32: its input, act(gate) * up, has the outlier channels
    that one int8 scale per call rounds away. On Qwen2.5-Coder-0.5B drafting for the 1.5B,
    quantizing it too cut agreement on code from 0.92 to 0.86 for a step 0.10 instead of 0.16
    target steps (README, Cards)."""
    import warnings

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        raise SpecdecError(f"int8 needs torch.ao.quantization.quantize_dynamic, gone from torch {torch.__version__}") from None
    layers = {name: per_channel_dynamic_qconfig for name, module in lm.model.named_modules()
              if isinstance(module, torch.nn.Linear) and not name.endswith(KEEP_FLOAT)}
    with warnings.catch_warnings():  # deprecated (moving to torchao), still working in torch 2.13
        warnings.simplefilter("ignore")
        quantize_dynamic(lm.model, layers, dtype=torch.qint8, inplace=True)
    return lm


KEEP_FLOAT = ("down_proj",)  # quantize_int8 leaves these layers float (Llama, Qwen, Mistral, Gemma naming)
