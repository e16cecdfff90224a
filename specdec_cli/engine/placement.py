"""Where and in what a card's target runs: its device, its dtype and its forwards' shapes, as
the card's `auto` resolves them on this machine."""

from __future__ import annotations

import torch

from specdec_cli.checks import DTYPE_NAMES
from specdec_cli.errors import SpecdecError

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # name -> torch.dtype


def resolve_device(name: str) -> torch.device:
    """'auto' = CUDA, else MPS, else CPU. An explicit device that is absent is an error."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecdecError(f"device '{name}' requested but CUDA is not available on this machine (use --device cpu or auto)")
        index = torch.device(name).index
        if index is not None and index >= torch.cuda.device_count():
            raise SpecdecError(f"device '{name}' requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    if name == "mps" and not mps:
        raise SpecdecError("device 'mps' requested but MPS is not available on this machine (use --device cpu or auto)")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' = float32 on CPU, bfloat16 on CUDA, float16 on MPS. On a CPU, load_pair then times
    bfloat16 against float32 where the card leaves it open and keeps the faster (engine/dtypes.py)."""
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float16 if device.type == "mps" else torch.float32
    return DTYPES[name]


def resolve_shapes(name: str, dtype: torch.dtype, device: torch.device, quantize: str = "none") -> str:
    """'auto' = pinned where a 1-token step and a verify would round differently (bfloat16,
    float16, any GPU, int8 layers: a last-bit difference moves a rounding step), else free
    (float32 on a CPU: argmax-identical in every check, and cheaper)."""
    if name != "auto":
        return name
    return "pinned" if dtype != torch.float32 or device.type != "cpu" or quantize != "none" else "free"
