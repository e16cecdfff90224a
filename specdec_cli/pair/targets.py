"""The card's target, loaded as the card asks: its dtype (`dtype: auto` on a CPU measured here,
engine/dtypes.py), int8 layers and forward policy. loading.py builds the Pair around it."""

from __future__ import annotations

import gc
from contextlib import nullcontext
from pathlib import Path

import torch

from specdec_cli.cards.card import Card
from specdec_cli.engine import costs as cost_model
from specdec_cli.engine import dtypes, kernels
from specdec_cli.engine.kvcache import unsupported
from specdec_cli.engine.models import HFLM, ModelRef, load
from specdec_cli.engine.placement import resolve_shapes
from specdec_cli.errors import SpecdecError


def forward_policy(card: Card, target, dtype: torch.dtype, on_compile=None) -> kernels.ForwardPolicy:
    """The shapes and matmul forms the target's forwards take, given to it now (kernels.py).
    Pinned shapes need the KV cache the loop owns (kvcache.py): a target it cannot hold is refused
    when asked for by name, and runs free shapes under `auto`. With decoding.compile the pinned
    decode forwards run the compiled model (kernels.compiled), over a fixed-capacity KV buffer."""
    if card.compile and not (isinstance(target, HFLM) and not unsupported(target)):
        raise SpecdecError(f"{card.path}: decoding.compile: true needs a transformers target held in specdec's own "
                           f"KV cache (a compiled forward's shape is fixed there), got {card.target}")
    shapes = resolve_shapes(card.shapes, dtype, target.device, card.quantize)
    if shapes == "pinned" and isinstance(target, HFLM) and unsupported(target):
        if card.shapes == "pinned":
            raise SpecdecError(f"{card.path}: decoding.shapes: pinned needs the KV cache specdec owns, but target "
                               f"{card.target}: {unsupported(target)}; use shapes: free")
        shapes = "free"
    if not isinstance(target, HFLM):
        return kernels.ForwardPolicy(shapes, "off")
    # the matmul forms are a CPU target's; inductor chooses the compiled forward's, but for the prepacked weights
    forms = card.matmuls if target.device.type == "cpu" and not card.device_map and (
        not card.compile or card.matmuls == "packed") else "off"
    if forms == "packed" and not target.can_pack():  # every forward prepacked: the plain weights go (kernels.py)
        raise SpecdecError(f"{card.path}: decoding.matmuls: packed needs a float32 target, or a bfloat16 one on a "
                           f"CPU with oneDNN's bfloat16 kernels, and a torch with oneDNN (this target is "
                           f"{str(dtype).removeprefix('torch.')}); use measure")
    return target.configure(shapes, forms, card.compile, on_compile)


def quantize(card: Card, target, device: torch.device) -> None:
    """quantize: int8 (engine/quantize.py): a transformers target on a CPU, in float32."""
    if card.quantize == "none":
        return
    if not isinstance(target, HFLM):
        raise SpecdecError(f"{card.path}: quantize: int8 needs a transformers target, got {card.target}")
    if device.type != "cpu":
        raise SpecdecError(f"{card.path}: quantize: int8 runs on the CPU (oneDNN's int8 kernels), but device "
                           f"{card.device!r} is {device}; use device: cpu")
    target.quantize(card.quantize)


def source_name(ref: ModelRef) -> str:
    return str(Path(ref.source) / ref.gguf_file) if ref.gguf_file else ref.source


def chooses_dtype(card: Card, device: torch.device, target_ref: ModelRef) -> bool:
    """Whether `dtype: auto` measures float32 against bfloat16 here (engine/dtypes.py): a
    transformers target on a CPU whose card leaves the choice open (no int8 layers, no compile,
    no device_map, no free shapes or float32 matmul audit, which are float32's or inexact in
    bfloat16)."""
    return (card.dtype == "auto" and device.type == "cpu" and target_ref.kind != "toy" and card.quantize == "none"
            and not card.compile and not card.device_map and card.shapes != "free" and card.matmuls == "measure")


def load_target(card: Card, ref: ModelRef, device: torch.device, dtype: torch.dtype, on_compile=None,
                on_convert=None) -> tuple:
    """(target, tokenizer, forward policy): the card's target loaded in `dtype`, quantized as the
    card says and given its forward policy."""
    # device_map: auto spreads the target over the GPUs; the draft then goes to target.device,
    # the first of them (where the embedding, and so every input, lives)
    target, tokenizer = load(ref, device, dtype, card.trust_remote_code, card.revision,
                             device_map=card.device_map, on_convert=on_convert)
    quantize(card, target, device)
    return target, tokenizer, forward_policy(card, target, dtype, on_compile)


def load_chosen(card: Card, ref: ModelRef, device: torch.device, dtype: torch.dtype, on_compile=None,
                on_convert=None, on_measure=None) -> tuple[tuple, torch.dtype, dtypes.Choice | None]:
    """(load_target's tuple, the dtype it was loaded in, what dtype: auto chose or None): in
    `dtype` where the card fixes it (chooses_dtype), else in the choice remembered for this model
    and CPU, or measured now (measure_dtype, inside `on_measure()`)."""
    if not chooses_dtype(card, device, ref):
        return load_target(card, ref, device, dtype, on_compile, on_convert), dtype, None
    key = dtypes.key(source_name(ref), card.revision)
    choice = dtypes.read(key)
    if choice is None:
        with on_measure() if on_measure else nullcontext():
            loaded, choice = measure_dtype(card, ref, device, key, on_compile, on_convert)
    else:
        loaded = load_target(card, ref, device, choice.torch_dtype, on_compile, on_convert)
    return loaded, choice.torch_dtype if choice else dtype, choice


def measure_dtype(card: Card, ref: ModelRef, device: torch.device, key: dict, on_compile=None,
                  on_convert=None) -> tuple[tuple, dtypes.Choice | None]:
    """`dtype: auto`'s measurement (engine/dtypes.py), once per model and CPU: the target loaded
    in float32 and then in bfloat16 (one at a time: one copy of the weights), each timed through
    its cost profile (cached too, so the run that follows measures nothing again). Returns
    load_target's tuple in the chosen dtype, and the choice (None for a target too fast to time:
    float32, nothing remembered). A float32 win loads float32 again."""
    name, width = source_name(ref), dtypes.WIDTH
    loaded = load_target(card, ref, device, torch.float32, on_compile, on_convert)
    context = cost_model.probe_ids(loaded[0], 64)
    if cost_model.forward_seconds([(loaded[0], 1)], context, repeats=3)[0] < cost_model.CHECKED_STEP_S:
        return loaded, None  # a tiny target: its steps are timer noise, and float32 costs it nothing
    measured = cost_model.profile(loaded[0], name, card.revision, {}, width)
    float32_s, busy = dtypes.round_seconds(measured, width, loaded[2].shapes == "pinned"), measured.busy
    del loaded
    gc.collect()
    loaded = load_target(card, ref, device, torch.bfloat16, on_compile, on_convert)
    measured = cost_model.profile(loaded[0], name, card.revision, {}, width)
    choice = dtypes.decide(float32_s, dtypes.round_seconds(measured, width, loaded[2].shapes == "pinned"))
    if not (busy or measured.busy):  # a choice made beside another job would be wrong for good
        dtypes.write(key, choice)
    if choice.dtype == "float32":
        del loaded
        gc.collect()
        loaded = load_target(card, ref, device, torch.float32, on_compile, on_convert)
    return loaded, choice
