"""The forward policy: which shape and which matmul form each target forward takes.

`ForwardPolicy` is given to the target when the pair is loaded and shown in --json
(`forward_policy`): `shapes` (pinned: every decode-phase forward [rows, W] over a fixed KV buffer,
bitwise-exact in any dtype; free: [rows, d+1], the least work; kvcache.py) and `matmuls`, how a CPU
target's linear layers compute few-token products (float32, or bfloat16 where oneDNN has bfloat16
kernels on the CPU: can_pack):
    measure  the cost profile times each forward shape in every form and keeps the fastest world:
             the plain weights (F.linear or W @ xᵀ per width) or, where oneDNN's prepacked weights
             are faster across the widths, those for every forward and the plain ones freed; never
             both copies (after the first, measuring run on a machine)
    off      torch's F.linear everywhere
    all      W @ xᵀ at every width 1..k+1 (the greedy step's too) and every batched [rows, n >= 2],
             untimed (an exactness audit of that form)
    packed   oneDNN's prepacked weights for every forward, prefill included, untimed (likewise); the
             plain weights are then freed: one copy in memory. In the prepacked weights (asked
             for, or chosen by measure) a layer's q/k/v and an MLP's gate/up are one weight each
             (PackedGroup)
The LM head keeps its plain weight and never takes the prepacked form (a tied embedding or a
features draft reads that weight: a packed copy would be a second one); in the packed world it
takes F.linear or, at the widths where that measured faster, W @ xᵀ.
The forms: F.linear (x @ Wᵀ), weight-major (W @ xᵀ)ᵀ, which streams the weights once, and
oneDNN's prepacked weights (one of the packed forms torch.compile's CPU backend can run). Which wins
depends on the machine, the dtype, the shapes and the row count, so nothing is assumed
(docs/kernels.md has the measurements and the commands that made them). Every prefill keeps
F.linear but in the packed world (the plain weights are gone there). The forms' rows differ
from F.linear's in the last bits: the rounding class verify-exactness covers in float32; pinned
shapes keep bfloat16 bitwise, each forward taking one form.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from specdec_cli import settings
from specdec_cli.engine import memory
from specdec_cli.engine.fused import Shared, groups
from specdec_cli.engine.memory import give_back
from specdec_cli.files import cache_dir

MODES = ("measure", "off", "all", "packed")


class WeightMajor:
    """Which forwards' linear layers leave F.linear, by the forward's exact shape: `widths`, the
    n of a one-row forward [1, n] that compute W @ xᵀ; `rectangles`, the (rows, n) of a batched
    one [rows, n] that do; `packed`, the (rows, n) that take oneDNN's prepacked weights (kept in
    `packs`, one per layer, made on first use), where `widths` and `rectangles` then name the
    forwards whose LM head (kept plain) computes W @ xᵀ. While `paused` (a prefill) none do. Once
    `whole` (pack_all: the plain weights are freed), every forward takes the prepacked weights."""

    def __init__(self, mode: str = "measure") -> None:
        self.mode = mode  # ForwardPolicy.matmuls
        self.widths: frozenset[int] = frozenset()
        self.rectangles: frozenset[tuple[int, int]] = frozenset()
        self.packed: frozenset[tuple[int, int]] = frozenset()
        self.packs: dict[torch.nn.Linear | PackedGroup, torch.Tensor] = {}
        self.paused = False
        self.whole = False
        self.layers: list[SwitchedLinear] = []  # the layers that ask this switch (install)

    @staticmethod
    def shape(x: torch.Tensor) -> tuple[int, int]:
        """x: [..., in]; [rows, n, in] is one forward of rows x n tokens ([n, in]: one row)."""
        rows = x.shape[0] if x.dim() >= 3 else 1
        return rows, x.numel() // x.shape[-1] // rows

    def takes(self, x: torch.Tensor) -> bool:
        """Whether x's forward leaves F.linear (for W @ xᵀ or the prepacked weights)."""
        if self.whole:  # every forward, a prefill too: the plain weights are gone (pack_all)
            return True
        if self.paused:
            return False
        key = self.shape(x)
        return key in self.packed or self.major(*key)

    def major(self, rows: int, n: int) -> bool:
        """Whether a [rows, n] forward computes W @ xᵀ (in the packed world: its LM head does)."""
        return n in self.widths if rows == 1 else (rows, n) in self.rectangles

    def form(self, rows: int, n: int) -> str:
        """The form a [rows, n] forward takes: linear (F.linear), weight_major or packed."""
        if self.whole or (rows, n) in self.packed:
            return "packed"
        return "weight_major" if self.major(rows, n) else "linear"

    @contextmanager
    def trying(self, rows: int, n: int, form: str):
        """The [rows, n] forward in `form` (linear, weight_major, packed, or packed_head: packed
        with the LM head in W @ xᵀ) while timing it; the forms chosen before come back on exit,
        whatever happened (measuring leaves nothing on)."""
        major, packs = form in ("weight_major", "packed_head"), form in ("packed", "packed_head")
        with self.keeping():
            if rows == 1:
                self.widths = (self.widths | {n}) if major else (self.widths - {n})
            else:
                self.rectangles = (self.rectangles | {(rows, n)}) if major else (self.rectangles - {(rows, n)})
            self.packed = (self.packed | {(rows, n)}) if packs else (self.packed - {(rows, n)})
            yield

    @contextmanager
    def plain(self):
        """F.linear wherever W @ xᵀ was chosen, until exit (a peer running the model as it comes)."""
        with self.keeping():
            self.widths, self.rectangles = frozenset(), frozenset()
            yield

    @contextmanager
    def keeping(self):
        """Whatever is switched on inside, the forms chosen before come back on exit."""
        before = self.widths, self.rectangles, self.packed
        try:
            yield
        finally:
            self.widths, self.rectangles, self.packed = before

    def use(self, weight_major: list[int], packed: list[int]) -> None:
        """One-row forwards [1, n] switched on as a profile chose (every other one-row width
        back to F.linear; batched rectangles untouched). Packed widths mean the packed world
        (costs.choose_forms): every forward prepacked, the plain weights freed (pack_all), and
        `weight_major` the widths whose LM head computes W @ xᵀ."""
        self.widths = frozenset(weight_major)
        self.packed = frozenset(key for key in self.packed if key[0] > 1) | {(1, n) for n in packed}
        if packed:
            self.pack_all()

    def use_rectangles(self, weight_major: set) -> None:
        """Batched forwards [rows, n] switched to W @ xᵀ as a profile chose (added to those already
        on); a batch's prepacked world is pack_all."""
        self.rectangles = self.rectangles | frozenset(weight_major)

    def pack(self, layer: torch.nn.Linear | PackedGroup) -> torch.Tensor:
        """The layer's prepacked weight (a group's: its layers' weights as one), made on first use."""
        if layer not in self.packs:
            weight = layer.joined() if isinstance(layer, PackedGroup) else layer.weight.detach()
            self.packs[layer] = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        return self.packs[layer]

    def unpack(self) -> None:
        """Free the prepacked copies (a measurement that did not choose them; once `whole` they
        are the only copies, and stay)."""
        if not self.whole:
            self.packs.clear()

    def pack_all(self) -> None:
        """Every forward prepacked from now on: each layer packed (but the LM head) and its plain
        weight freed at once (left as an empty tensor of the same dtype and device), so memory
        holds one copy of each weight, and never two of all of them."""
        self.whole = True
        for layer in self.layers:
            if layer.packable and layer.weight.numel():
                self.pack(layer.group or layer)  # a group: at its first layer, before any of its weights goes
                layer.weight = torch.nn.Parameter(layer.weight.new_empty(0), requires_grad=False)
        give_back()  # the plain weights just freed


def can_pack(model: torch.nn.Module) -> bool:
    """oneDNN's prepacked linear runs here: a CPU model in float32, or in bfloat16 where this CPU
    has oneDNN's bfloat16 kernels (AVX-512 BF16 or AMX: bf16_kernels), a torch with mkldnn."""
    try:
        ops = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return False
    weight = next((m.weight for m in model.modules() if type(m) in (torch.nn.Linear, SwitchedLinear)), None)
    return (all(ops) and torch.backends.mkldnn.is_available() and weight is not None and weight.device.type == "cpu"
            and (weight.dtype == torch.float32 or weight.dtype == torch.bfloat16 and bf16_kernels()))


def bf16_kernels() -> bool:
    """Whether oneDNN has native bfloat16 kernels on this CPU (elsewhere it would emulate them)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


ROOM = 1.25  # timing the prepacked form needs this much free memory for each byte it packs


def no_room_to_pack(model: torch.nn.Module) -> str | None:
    """Why the prepacked form cannot be timed here (None: it can): timing packs a copy of every
    weight but the LM head's beside the plain ones (docs/kernels.md has the peak it made), so it is
    not tried where that copy does not fit in the memory available, with ROOM to spare (where it
    wins it is kept as the one copy)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    layers = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head}
    needed = sum(w.numel() * w.element_size() for w in layers.values())
    free = memory.available_bytes()
    if free is None or free >= ROOM * needed:
        return None
    return f"a packed copy of the target's weights ({needed / 1e9:.1f} GB) does not fit in the {free / 1e9:.1f} GB available"


class SwitchedLinear(torch.nn.Linear):
    """An nn.Linear whose forward asks the policy's switch which form to compute in. It shares
    the original layer's weight and bias (tied weights stay tied). `packable`: False for the LM
    head, which keeps its plain weight (module doc). `group`: the PackedGroup it is part `index`
    of, prepacked with the layers that read its input (None: prepacked alone)."""

    def __init__(self, layer: torch.nn.Linear, switch: WeightMajor, packable: bool = True):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight, self.bias, self.switch, self.packable = layer.weight, layer.bias, switch, packable
        self.group: PackedGroup | None = None
        self.index = 0
        switch.layers.append(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self, self.switch, x)


class PackedGroup(Shared):
    """SwitchedLinear layers that read one input (fused.FUSED), prepacked as one weight: one
    oneDNN call where there were two or three. On SmolLM2-135M's shapes in bfloat16 (AMX) its
    matmuls took 0.87x the separate calls' time at 1, 5 and 8 rows, the outputs bitwise the same
    (docs/kernels.md). The plain layers compute alone; the packed world computes the group
    (`split`; `part` for transformers' forward, which calls the layers one by one)."""

    def __init__(self, layers: list[SwitchedLinear]) -> None:
        self.layers, self.sizes = tuple(layers), [m.out_features for m in layers]
        self.bias: torch.Tensor | None = None  # the layers' biases as one, made with the pack (joined)
        for i, layer in enumerate(layers):
            layer.group, layer.index = self, i

    def joined(self) -> torch.Tensor:
        """The layers' weights as one [sum of outputs, in] (and their biases, as `bias`), to pack."""
        first = self.layers[0].weight
        if any(m.bias is not None for m in self.layers):
            self.bias = torch.cat([m.bias.detach() if m.bias is not None else first.new_zeros(m.out_features)
                                   for m in self.layers])
        return torch.cat([m.weight.detach() for m in self.layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in] -> every layer's output, side by side [..., sum of outputs]."""
        return prepacked(x, self.layers[0].switch.pack(self), self.bias, sum(self.sizes))


def install(model: torch.nn.Module, mode: str = "measure") -> WeightMajor:
    """Replace every plain nn.Linear of `model` by a SwitchedLinear on one new switch (module
    surgery, as quantize_dynamic does: no method of a layer is rebound). With no widths set,
    that is F.linear exactly."""
    switch = WeightMajor(mode)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:  # not the int8 or other subclasses
                setattr(parent, name, SwitchedLinear(child, switch, packable=child is not head))
            elif type(child) is SwitchedLinear:  # installed before: the new switch decides now
                child.switch = switch
                switch.layers.append(child)
        for _, layers in groups(parent, lambda m: type(m) is SwitchedLinear and m.packable):
            PackedGroup(layers)
    if mode == "packed":
        switch.pack_all()
    return switch


@dataclass
class ForwardPolicy:
    """What shape and matmul form each of the target's forwards takes (module doc)."""

    shapes: str  # pinned | free
    matmuls: str  # measure | off | all | packed (a CPU target's forms; "off" elsewhere)
    switch: WeightMajor | None = None  # the forms chosen so far, per forward shape
    compiled: bool = False  # decoding.compile: the loop's decode forwards run the compiled model (compiled below)
    padded: dict[int, int] = field(default_factory=dict)  # free shapes, one row: n -> the cheaper wider width it runs at

    def width(self, n: int) -> int:
        """The width a free-shape one-row forward of n new tokens runs at (padded where wider is cheaper)."""
        return self.padded.get(n, n)

    def form(self, rows: int, n: int) -> str:
        """The matmul form a [rows, n] forward takes (linear where there is no switch)."""
        return "linear" if self.switch is None else self.switch.form(rows, n)

    def as_dict(self) -> dict:
        s = self.switch
        forms = {} if s is None else {"weight_major": sorted(s.widths), "rectangles_weight_major": sorted(map(list, s.rectangles)),
                                      "packed": sorted(map(list, s.packed))}
        return {"shapes": self.shapes, "matmuls": self.matmuls, **forms, **({"compile": True} if self.compiled else {}),
                **({"padded": {str(n): w for n, w in sorted(self.padded.items())}} if self.padded else {})}


def compiled(forward: Callable) -> Callable:
    """`forward` (decoder.Decoder where it runs, else the transformers model) through torch.compile
    for the loop's decode forwards over a fixed-capacity KV buffer (kvcache.py). Sizes are static
    until a second size is met (dynamo's automatic dynamic): the plain step's width 1 keeps a graph
    of its own and the first wider forward compiles one graph over every width 2..k+1, where a
    graph per width traced each of them again in every process. The weights are read from the
    eager model's own parameters (one copy), not frozen: inductor's on-disk caches (FX graphs, AOT
    autograd; keyed by graph, shapes, dtype and torch version) then serve every later process from
    specdec's cache (compile_cache), so a graph compiles once per machine (docs/kernels.md). In
    the packed world the graph calls the prepacked weights (`prepacked`)."""
    compile_cache()
    return torch.compile(forward, dynamic=None)


OURS: set[Path] = set()  # the places compile_cache has set


def compile_cache() -> Path:
    """Where inductor keeps compiled graphs: specdec's cache (inductor/), unless the user named a
    directory in TORCHINDUCTOR_CACHE_DIR (settings.compile_cache). Inductor writes its entries
    atomically, and itself sets the variable to its default (/tmp/torchinductor_$USER) when an
    import asks for the place first, so that value and ours are not taken for the user's."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    named = settings.compile_cache(OURS | {Path(default_cache_dir()).absolute()})
    if named is not None:
        return named
    path = cache_dir("inductor").absolute()
    OURS.add(path)
    settings.set_compile_cache(path)
    return path


def _linear(layer: torch.nn.Linear, switch: WeightMajor, x: torch.Tensor) -> torch.Tensor:
    return form_of(switch, x)(layer, x)


def form_of(switch: WeightMajor | None, x: torch.Tensor) -> Callable[[torch.nn.Linear, torch.Tensor], torch.Tensor]:
    """The function (layer, x) -> y every linear layer of x's forward computes with: what
    SwitchedLinear.forward asks per call, asked once per forward by decoder.py."""
    if switch is None or not switch.takes(x):
        return plain
    return packed if switch.form(*switch.shape(x)) == "packed" else weight_major


def plain(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def packed(layer: SwitchedLinear, x: torch.Tensor) -> torch.Tensor:
    """x: [rows, n, in] -> [rows, n, out] through the layer's prepacked weight (the LM head keeps
    its plain weight: W @ xᵀ where the switch says so for x's forward, else F.linear)."""
    if layer.group is not None:
        return layer.group.part(x, layer.index)
    if not layer.packable:
        major = layer.switch.major(*layer.switch.shape(x))
        return weight_major(layer, x) if major else F.linear(x, layer.weight, layer.bias)
    return prepacked(x, layer.switch.pack(layer), layer.bias, layer.out_features)


def prepacked(x: torch.Tensor, pack: torch.Tensor, bias: torch.Tensor | None, out: int) -> torch.Tensor:
    """x [..., in] -> [..., out] through oneDNN's prepacked weight `pack`; in a graph being
    compiled, as the opaque op `specdec::packed_linear` (inductor lowers oneDNN's linear only
    over weights it froze and packed itself), called as is from the compiled code."""
    if torch.compiler.is_compiling():
        return _packed_linear(x, pack, bias, out)
    return _onednn_linear(x, pack, bias)


def _onednn_linear(x: torch.Tensor, pack: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), pack, bias, "none", [], "")


@torch.library.custom_op("specdec::packed_linear", mutates_args=(),
                         schema="(Tensor x, Tensor pack, Tensor? bias, SymInt out) -> Tensor")
def _packed_linear(x, pack, bias, out):
    return _onednn_linear(x, pack, bias)


@_packed_linear.register_fake
def _(x, pack, bias, out):
    return x.new_empty(*x.shape[:-1], out)


def weight_major(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """(W @ xᵀ)ᵀ: the weights streamed once for the forward's few rows."""
    rows = x.numel() // x.shape[-1]  # x: [..., in]; rows of the matmul = tokens in this forward (batch included)
    flat = x.reshape(rows, x.shape[-1]).t()  # [in, rows], a view
    if layer.bias is None:
        y = torch.mm(layer.weight, flat)  # [out, rows]
    else:
        y = torch.addmm(layer.bias[:, None], layer.weight, flat)
    return y.t().contiguous().view(*x.shape[:-1], y.shape[0])  # [..., out], row-major like F.linear's
