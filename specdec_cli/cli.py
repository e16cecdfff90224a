"""The `specdec` command line: parse, call one library function, render. No torch code here."""

from __future__ import annotations

import functools
import json
import sys
from typing import Optional

import typer
from rich.console import Console

from .cards import MAX_K, builtin_names, check, load_card, override, _int
from .errors import SpecdecError

DEFAULT_CARD = "smollm2"
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Speculative (draft-verify) decoding: exact, faster greedy generation.")
cards_app = typer.Typer(invoke_without_command=True, add_completion=False, rich_markup_mode=None,
                        help="List the built-in model cards, or show one.")
app.add_typer(cards_app, name="cards")

out = Console(soft_wrap=True)  # data (text, JSON) only
err = Console(stderr=True)  # everything else: progress, tables, notes


def friendly(fn):
    """Turn SpecdecError into one 'Error: ...' line on stderr and its exit code."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecdecError as e:
            err.print(f"Error: {e}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.print("Interrupted.", markup=False)
            raise typer.Exit(130) from None
    return wrapper


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


def parse_ks(text: str) -> list[int]:
    ks = []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            raise SpecdecError(f"command line: -k: expected integers separated by commas, got {text!r}") from None
        check("command line", "-k", value, _int(1, MAX_K))
        ks.append(value)
    return ks


def emit_json(obj) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


def load(card_name: str, **overrides):
    from .pair import load_pair

    card = override(load_card(card_name), **overrides)
    with err.status(f"Loading {card.target} and its {card.draft.label()} draft…"):
        pair = load_pair(card)
    err.print(f"[dim]card {card.name}: target {card.target} · draft {pair.draft.name} · "
              f"{pair.device} {pair.dtype_name}[/]", highlight=False)
    return pair


CARD = typer.Option(DEFAULT_CARD, "--card", "-c", help="Built-in card name or path to a YAML card.")
DEVICE = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N or mps (overrides the card).")
DTYPE = typer.Option(None, "--dtype", help="auto, float32, bfloat16 or float16 (overrides the card).")
MAX_TOKENS = typer.Option(None, "--max-tokens", "-n", help="Tokens to generate at most (overrides the card).")
JSON = typer.Option(False, "--json", help="Print only JSON on stdout.")
PROMPTS_FILE = typer.Option(None, "--prompts-file", help=".jsonl ({'prompt', 'id'}) or .txt (one per line); - = JSON lines on stdin.")


@app.command()
@friendly
def generate(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; '-' or piped stdin reads it from stdin."),
    card: str = CARD,
    mode: str = typer.Option("both", "--mode", "-m", help="spec, greedy or both (both checks they are identical)."),
    k: Optional[int] = typer.Option(None, "-k", "--k", help="Draft tokens per round (overrides the card)."),
    max_tokens: Optional[int] = MAX_TOKENS,
    rounds: bool = typer.Option(False, "--rounds", help="Show the per-round accept table."),
    as_json: bool = JSON,
    prompts_file: Optional[str] = PROMPTS_FILE,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
):
    """Generate from one prompt, speculatively and/or plain greedy, and compare.

    Examples:

        specdec generate "Explain what a hash table is."

        echo "Why is the sky blue?" | specdec generate --rounds

        specdec generate --card toy -k 6 --json "ba be bi"

        specdec generate --prompts-file prompts.jsonl > results.jsonl
    """
    from .pair import generate as run
    from .prompts import read_prompts
    from .render import generation_json, show_generation

    if mode not in ("spec", "greedy", "both"):
        raise SpecdecError(f"command line: --mode: must be spec, greedy or both, got {mode!r}")
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
    pair = load(card, k=k, max_tokens=max_tokens, device=device, dtype=dtype)
    c = pair.card
    if batch is not None:
        differ = 0
        for p in batch:
            gen = run(pair, p.text, mode, c.k, c.max_tokens)
            emit_json({"id": p.id, **generation_json(gen, pair)})
            differ += gen.identical is False
        if differ:
            err.print(f"Error: {differ} of {len(batch)} prompts gave speculative output different from greedy")
            raise typer.Exit(1)
        return
    gen = run(pair, prompt, mode, c.k, c.max_tokens)
    if as_json:
        emit_json(generation_json(gen, pair))
    else:
        show_generation(gen, pair, out, err, rounds)
    if gen.identical is False:
        raise typer.Exit(1)


@app.command("verify-exactness")
@friendly
def verify_exactness(
    prompts: Optional[list[str]] = typer.Argument(None, help="Prompts (default: the built-in suite)."),
    card: str = CARD,
    ks: str = typer.Option("1,2,4,8", "-k", "--k", help="Comma-separated k values."),
    drafts: Optional[list[str]] = typer.Option(
        None, "--draft", "-d", help="Draft to check (repeatable): KIND[:key=value,...], e.g. early-exit:layers=10. Default: the card's."),
    max_tokens: Optional[int] = MAX_TOKENS,
    prompts_file: Optional[str] = PROMPTS_FILE,
    as_json: bool = JSON,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
):
    """Prove speculative == greedy over prompts x k x drafts; explain any divergence.

    Exit 0 when every output is identical, 1 on any divergence, 2 on usage errors.

    Examples:

        specdec verify-exactness -k 1,2,4,8

        specdec verify-exactness --card toy -d toy:agree=0.3 -d toy:agree=0.9 "ba be"

        specdec verify-exactness --prompts-file prompts.jsonl --json
    """
    from .pair import build_draft
    from .prompts import SUITE, Prompt, read_prompts
    from .render import verify_table
    from .verify import parse_draft_option, verify

    k_list = parse_ks(ks)
    specs = [parse_draft_option(d) for d in drafts or []]
    if prompts and prompts_file:
        raise SpecdecError("give either PROMPTS or --prompts-file, not both")
    if prompts_file:
        items = read_prompts(prompts_file, read_stdin() if prompts_file == "-" else None)
    elif prompts:
        items = [Prompt(f"arg-{i}", text) for i, text in enumerate(prompts, 1)]
    else:
        items = SUITE
    pair = load(card, max_tokens=max_tokens, device=device, dtype=dtype)
    draft_list = [build_draft(s, pair) for s in specs] or [pair.draft]
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
