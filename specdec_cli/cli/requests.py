"""What each command was asked to do, checked before anything is loaded.

One dataclass per command, built from its options; building it checks every option and how
they combine, and raises SpecdecError (exit 2) naming the option, in the order the command has
always checked them. The CLI only parses and renders; these rules are tested directly
(tests/test_requests.py). No torch here: the commands import this module at start-up.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path

from specdec_cli.cards.card import MAX_K, Card, DraftSpec, override
from specdec_cli.checks import check, integer as _int, probability as _prob
from specdec_cli.engine.taps import FINAL
from specdec_cli.errors import SpecdecError
from specdec_cli.cards.prompts import SUITE, Prompt, first_per_category, read_prompts, read_stdin
from specdec_cli.training.trainprompts import training_prompts

MODES = ("spec", "greedy", "both")
MAX_BATCH = 256
AGREE_SWEEP = "0.3,0.5,0.7,0.9,1.0"  # bench --agree-sweep given bare
K_SWEEP = "1,2,3,4,6,8"  # bench --k-sweep given bare


# ---------------------------------------------------------------------------- option values
def parse_list(text: str, option: str, convert, checker, what: str) -> list:
    """A comma-separated option value, each item converted and checked like a card field."""
    values = []
    for item in text.split(","):
        try:
            value = convert(item)
        except ValueError:
            raise SpecdecError(f"command line: {option}: expected {what} separated by commas, got {text!r}") from None
        check("command line", option, value, checker)
        values.append(value)
    return values


def parse_ks(text: str, option: str = "-k") -> list[int]:
    return parse_list(text, option, int, _int(1, MAX_K), "integers")


def parse_agrees(text: str) -> list[float]:
    return parse_list(text, "--agree-sweep", float, _prob, "numbers in [0, 1]")


def parse_drafts(texts: list[str] | None) -> list[DraftSpec]:
    from specdec_cli.eval.verify import parse_draft_option  # verify imports pair, hence torch: not at start-up

    return [parse_draft_option(d) for d in texts or []]


def check_unique(option: str, values: list) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise SpecdecError(f"command line: {option}: {', '.join(map(str, repeated))} given more than once")


def check_output_file(option: str, path: str, suffixes: tuple[str, ...] = ()) -> None:
    """Fail before a long run, not after it: a directory, a missing folder or a bad suffix."""
    p = Path(path).expanduser()
    if p.is_dir() or path.endswith(("/", "\\")):
        raise SpecdecError(f"command line: {option}: {path} is a directory; give a file name")
    if not p.parent.exists():
        raise SpecdecError(f"command line: {option}: folder {p.parent} does not exist")
    if suffixes and p.suffix.lower() not in suffixes:
        raise SpecdecError(f"command line: {option}: file name must end in {', '.join(suffixes)}, got {path!r}")


def check_batch(batch: int) -> None:
    check("command line", "--batch", batch, _int(1, MAX_BATCH))


def prompts_file_items(prompts_file: str) -> list[Prompt]:
    """The prompts of --prompts-file; `-` reads JSON lines from stdin."""
    return read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None)


# ---------------------------------------------------------------------------- generate
@dataclass
class GenerateRequest:
    """One prompt (the argument, piped stdin, or both), or every prompt of --prompts-file."""

    prompt: str | None = None
    prompts_file: str | None = None
    mode: str = "both"
    batch: int = 1

    def __post_init__(self):
        if self.mode not in MODES:
            raise SpecdecError(f"command line: --mode: must be spec, greedy or both, got {self.mode!r}")
        check_batch(self.batch)
        if self.batch > 1 and self.prompts_file is None:
            raise SpecdecError("command line: --batch: decodes the prompts of --prompts-file together; give --prompts-file")

    def read(self, stdin: str | None) -> tuple[str | None, list[Prompt] | None]:
        """(the prompt, None), or (None, the prompts of --prompts-file). `stdin`: piped text or None."""
        if self.prompts_file is not None:
            if self.prompt is not None:
                raise SpecdecError("give either PROMPT or --prompts-file, not both")
            return None, read_prompts(self.prompts_file, stdin)
        if self.prompt == "-" or self.prompt is None:
            if stdin is None:
                raise SpecdecError("no prompt: give PROMPT, pipe text on stdin, or use --prompts-file")
            prompt = stdin
        elif stdin is not None:
            prompt = f"{stdin.rstrip()}\n{self.prompt}"  # piped text first, then the argument (as llm does)
        else:
            prompt = self.prompt
        if not prompt.strip():
            raise SpecdecError("prompt is empty")
        return prompt, None


# ---------------------------------------------------------------------------- verify-exactness
@dataclass
class VerifyRequest:
    """Prompts x k x drafts to check; the sampling test's size and level."""

    prompts: list[str] | None = None
    prompts_file: str | None = None
    ks: str | None = None  # "1,2,4"; None: the command's default
    drafts: list[str] | None = None  # KIND[:key=value,...] each; None: the card's
    samples: int = 200
    positions: int = 2
    alpha: float = 0.01
    bitwise: bool = False  # compare the target's logits too
    batch: int = 1  # prompts decoded together
    k_list: list[int] | None = field(init=False)
    specs: list[DraftSpec] = field(init=False)

    def __post_init__(self):
        self.k_list = parse_ks(self.ks) if self.ks is not None else None
        check_batch(self.batch)
        check("command line", "--samples", self.samples, _int(10, 10_000_000))
        check("command line", "--positions", self.positions, _int(1, 64))
        if not 0 < self.alpha < 1:
            raise SpecdecError(f"command line: --alpha: must be a number in (0, 1), got {self.alpha!r}")
        self.specs = parse_drafts(self.drafts)
        if self.prompts and self.prompts_file:
            raise SpecdecError("give either PROMPTS or --prompts-file, not both")

    def items(self) -> list[Prompt] | None:
        """The prompts asked for; None: the default set (it depends on whether the card samples)."""
        if self.prompts_file:
            return prompts_file_items(self.prompts_file)
        if self.prompts:
            return [Prompt(f"arg-{i}", text) for i, text in enumerate(self.prompts, 1)]
        return None


# ---------------------------------------------------------------------------- plan
@dataclass
class PlanRequest:
    ks: str | None = None
    drafts: list[str] | None = None
    prompts_file: str | None = None
    limit: int = 1
    k_list: list[int] | None = field(init=False)
    specs: list[DraftSpec] = field(init=False)

    def __post_init__(self):
        self.k_list = parse_ks(self.ks) if self.ks is not None else None
        check("command line", "--limit", self.limit, _int(1, 1_000_000))
        self.specs = parse_drafts(self.drafts)

    def items(self) -> list[Prompt]:
        """The first --limit prompts of each category of --prompts-file or the built-in suite."""
        return first_per_category(prompts_file_items(self.prompts_file) if self.prompts_file else SUITE, self.limit)


# ---------------------------------------------------------------------------- bench
@dataclass
class BenchRequest:
    """What to time; the sweeps, their outputs, and which options may go together."""

    k: int | None = None
    agree_sweep: str | None = None  # "0.3,0.5"; the bare flag is expanded before parsing
    k_sweep: str | None = None
    repeats: int = 3
    limit: int | None = None
    prompts_file: str | None = None
    seed: int | None = None
    draft_cost: float | None = None
    vs_transformers: bool = False
    plot: str | None = None
    csv: str | None = None
    batch: int = 1
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    agrees: list[float] | None = field(init=False)
    k_list: list[int] | None = field(init=False)

    def __post_init__(self):
        self.agrees = agrees = parse_agrees(self.agree_sweep) if self.agree_sweep is not None else None
        self.k_list = ks = parse_ks(self.k_sweep, "--k-sweep") if self.k_sweep is not None else None
        check_unique("--agree-sweep", agrees or [])
        check_unique("--k-sweep", ks or [])
        if self.k is not None and ks:
            raise SpecdecError("command line: give -k or --k-sweep, not both")
        check("command line", "--repeats", self.repeats, _int(1, 1000))
        check_batch(self.batch)
        for option, given in (("--agree-sweep", agrees is not None), ("--vs-transformers", self.vs_transformers),
                              ("--draft-cost", self.draft_cost is not None)):
            if self.batch > 1 and given:
                raise SpecdecError(f"command line: --batch: cannot be combined with {option} (batched runs time the "
                                   "card's draft against the target alone)")
        if self.limit is not None:
            check("command line", "--limit", self.limit, _int(1, 1_000_000))
        if self.seed is not None:
            check("command line", "--seed", self.seed, _int(0, 2**63 - 1))
        if self.draft_cost is not None:
            if agrees is None:
                raise SpecdecError("command line: --draft-cost: simulates the synthetic draft's cost; needs --agree-sweep")
            if not 0 <= self.draft_cost <= 100:
                raise SpecdecError(f"command line: --draft-cost: must be a number of target steps in [0, 100], got {self.draft_cost!r}")
        if self.plot is not None:
            if agrees is None and ks is None:
                raise SpecdecError("command line: --plot: plots a sweep; add --agree-sweep and/or --k-sweep")
            check_output_file("--plot", self.plot, (".png", ".svg", ".pdf"))
            if importlib.util.find_spec("matplotlib") is None:
                raise SpecdecError("command line: --plot: needs matplotlib (pip install 'specdec[plot]')")
        if self.csv is not None:
            check_output_file("--csv", self.csv)

    @property
    def sweep(self) -> bool:
        return self.agrees is not None or self.k_list is not None

    def items(self) -> list[Prompt]:
        items = prompts_file_items(self.prompts_file) if self.prompts_file else SUITE
        return first_per_category(items, self.limit) if self.limit is not None else items

    @property
    def sampling(self) -> dict:
        """Card overrides for sampling; --seed seeds the synthetic draft instead under --agree-sweep."""
        return dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                    seed=self.seed if self.agrees is None else None)

    def check_card(self, card: Card) -> bool:
        """Whether the run samples (the card with these overrides), and the options that cannot go with that."""
        sampled = override(card, **self.sampling).temperature > 0
        if sampled and self.agrees is not None:
            raise SpecdecError("command line: --agree-sweep: the synthetic draft's agreement is defined for greedy "
                               "decoding; drop --temperature (or use a card with temperature 0)")
        if sampled and self.vs_transformers:
            raise SpecdecError("command line: --vs-transformers: compares greedy outputs token for token; "
                               "drop --temperature (or use a card with temperature 0)")
        if self.seed is not None and self.agrees is None and not sampled:
            raise SpecdecError("command line: --seed: seeds the synthetic draft (--agree-sweep) or sampling "
                               "(--temperature > 0); neither is on")
        return sampled


# ---------------------------------------------------------------------------- distill
@dataclass
class DistillRequest:
    card: str
    prompts_file: str | None = None
    minutes: float = 30.0
    out_dir: str | None = None
    seed: int = 0
    steps: int | None = None
    prompts: int | None = None
    taps: str | None = None  # "3,15,-1": the target's hidden states the draft reads (None: the final one alone)
    self_prompts: int = 0  # requests the target writes itself, beside the training prompts

    def __post_init__(self):
        if not (isinstance(self.minutes, (int, float)) and math.isfinite(self.minutes) and self.minutes > 0):
            raise SpecdecError(f"command line: --minutes: must be a number > 0, got {self.minutes!r}")
        check("command line", "--seed", self.seed, _int(0, 2**63 - 1))
        for option, value in (("--steps", self.steps), ("--prompts", self.prompts)):
            if value is not None:
                check("command line", option, value, _int(1, 10**9))
        check("command line", "--self-prompts", self.self_prompts, _int(0, 10**6))
        self.tap_list()

    def tap_list(self) -> tuple[int, ...] | None:
        """--taps as layer counts ("final" or -1: the final hidden state), which must include the
        final one (the draft learns the target's distribution from it); None: not given."""
        if self.taps is None:
            return None
        try:
            taps = tuple(FINAL if t.strip() == "final" else int(t) for t in self.taps.split(","))
        except ValueError:
            raise SpecdecError(f"command line: --taps: must be layer counts separated by commas, e.g. 3,15,-1, "
                               f"got {self.taps!r}") from None
        if FINAL not in taps:
            raise SpecdecError(f"command line: --taps: must include -1 (the final hidden state, from which the draft "
                               f"learns the target's distribution), got {self.taps!r}")
        return taps

    def out_path(self, card_name: str) -> Path:
        return Path(self.out_dir or f"{card_name}-features").expanduser()

    def items(self) -> tuple[list[Prompt], str]:
        """The training prompts and where they came from (recorded in the card)."""
        if self.prompts_file:
            items, source = prompts_file_items(self.prompts_file), self.prompts_file
        else:
            items = training_prompts()
            source = f"specdec_cli.training.trainprompts ({len(items)} templated prompts)"
        return items, source + (f" and {self.self_prompts} the target wrote (--self-prompts)" if self.self_prompts else "")

    def command_line(self) -> str:
        """The command that replays this run (written into the card)."""
        return f"specdec distill -c {self.card} --minutes {self.minutes:g} --seed {self.seed}" + (
            f" --prompts-file {self.prompts_file}" if self.prompts_file else "") + (
            f" --steps {self.steps}" if self.steps else "") + (f" --prompts {self.prompts}" if self.prompts else "") + (
            f" --taps={self.taps}" if self.taps else "") + (f" --self-prompts {self.self_prompts}" if self.self_prompts else "")
