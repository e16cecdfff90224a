"""Rendering: Rich tables for people, JSON for scripts. Nothing here computes a metric."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .decoding import Result

DRAFT_STYLE, TARGET_STYLE = "green", "bold"


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


# ---------------------------------------------------------------------------- JSON
def result_json(result: Result, tokenizer, rounds: bool) -> dict:
    out = {"tokens": result.tokens, "text": tokenizer.decode(result.tokens), "metrics": result.stats.as_dict()}
    if rounds:
        out["rounds"] = [{"drafted": r.drafted, "accepted": r.accepted, "emitted": r.emitted} for r in result.rounds]
    return out


def generation_json(gen, pair) -> dict:
    out = {"card": pair.card.name, "prompt": gen.prompt, "prompt_tokens": len(gen.prompt_ids), "k": gen.k,
           "draft": pair.draft.name, "device": str(pair.device), "dtype": pair.dtype_name}
    if gen.spec:
        out["spec"] = result_json(gen.spec, pair.tokenizer, rounds=True)
    if gen.greedy:
        out["greedy"] = result_json(gen.greedy, pair.tokenizer, rounds=False)
    if gen.spec and gen.greedy:
        out["identical"] = gen.identical
        out["speedup"] = gen.speedup
    return out


# ---------------------------------------------------------------------------- generate
def round_segments(result: Result) -> list[tuple[list[int], str]]:
    """Split the output into (tokens, style) runs: accepted draft tokens, then the target's one."""
    segments, i = [], 0
    for r in result.rounds:
        from_draft = min(r.accepted, r.emitted)
        if from_draft:
            segments.append((result.tokens[i : i + from_draft], DRAFT_STYLE))
        if r.emitted > from_draft:
            segments.append((result.tokens[i + from_draft : i + r.emitted], TARGET_STYLE))
        i += r.emitted
    return segments


def colored_text(result: Result, tokenizer) -> Text:
    """The output with draft-accepted tokens visibly distinct from target-supplied ones."""
    text, done, so_far = Text(), [], ""
    for tokens, style in round_segments(result):
        done += tokens
        full = tokenizer.decode(done)  # decode prefixes: multi-token characters stay whole
        text.append(full[len(so_far):], style=style)
        so_far = full
    return text


def rounds_table(result: Result, tokenizer) -> Table:
    table = Table(title="Rounds", title_justify="left")
    for col in ("round", "drafted", "accepted", "emitted", "text"):
        table.add_column(col, justify="right" if col != "text" else "left")
    i = 0
    for n, r in enumerate(result.rounds, 1):
        piece = tokenizer.decode(result.tokens[i : i + r.emitted])
        table.add_row(str(n), str(r.drafted), str(r.accepted), str(r.emitted), repr(piece)[1:-1])
        i += r.emitted
    return table


def summary_table(gen, pair) -> Table:
    table = Table(title=f"card {pair.card.name} · draft {pair.draft.name} · k={gen.k} · {pair.device}",
                  title_justify="left")
    table.add_column("metric")
    cols = [(name, res) for name, res in (("greedy", gen.greedy), ("speculative", gen.spec)) if res]
    for name, _ in cols:
        table.add_column(name, justify="right")
    rows = [("tokens", lambda s: str(s.tokens)),
            ("verify rounds", lambda s: str(s.verify_rounds)),
            ("tokens/round", lambda s: fmt(s.tokens_per_round)),
            ("acceptance rate", lambda s: fmt(s.accept_rate, ".1%")),
            ("target forwards", lambda s: str(s.target_forwards)),
            ("draft forwards", lambda s: str(s.draft_forwards)),
            ("wall time", lambda s: f"{s.wall_s:.3f} s"),
            ("tokens/s", lambda s: fmt(s.tokens_per_s, ".1f"))]
    for label, cell in rows:
        table.add_row(label, *(cell(res.stats) for _, res in cols))
    if gen.spec and gen.greedy:
        table.add_row("speedup", "", f"{fmt(gen.speedup)}x")
        table.add_row("identical", "", "[green]yes[/]" if gen.identical else "[red]NO[/]")
    return table


def show_generation(gen, pair, out: Console, err: Console, rounds: bool) -> None:
    shown = gen.spec or gen.greedy
    if gen.spec and out.is_terminal:
        out.print(colored_text(gen.spec, pair.tokenizer))
        err.print(Text.assemble(("accepted from the draft", DRAFT_STYLE), " · ", ("from the target", TARGET_STYLE)))
    else:
        out.print(pair.tokenizer.decode(shown.tokens), markup=False, highlight=False, soft_wrap=True)
    if rounds and gen.spec:
        err.print(rounds_table(gen.spec, pair.tokenizer))
    err.print(summary_table(gen, pair))
    if gen.identical is False:
        err.print("[red]Error: speculative output differs from greedy output[/]")


# ---------------------------------------------------------------------------- verify
def verify_table(checks, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("prompt", "draft", "k", "prompt tok", "gen tok", "identical", "divergence"):
        table.add_column(col, justify="left" if col in ("prompt", "draft", "divergence") else "right")
    for c in checks:
        d = c.first_divergence
        why = "" if d is None else (
            f"@{d['index']}: greedy {d['greedy_token']} {d['greedy_text']!r} vs spec {d['spec_token']} "
            f"{d['spec_text']!r}; target top-2 margin {d['margin']:.4g}")
        table.add_row(c.id, c.draft, str(c.k), str(c.prompt_tokens), str(len(c.spec_tokens)),
                      "[green]yes[/]" if c.identical else "[red]NO[/]", why)
    return table


# ---------------------------------------------------------------------------- cards
def cards_table(cards) -> Table:
    table = Table(title="Built-in cards", title_justify="left")
    for col in ("name", "target", "draft", "description"):
        table.add_column(col)
    for c in cards:
        table.add_row(c.name, c.target, c.draft.label(), c.description)
    return table
