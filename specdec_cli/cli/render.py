"""Rendering: Rich tables for people, JSON for scripts. Nothing here computes a metric."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specdec_cli.eval import columns

if TYPE_CHECKING:  # decoding imports torch and transformers: `specdec cards` needs neither
    from specdec_cli.loop.decoding import Result

DRAFT_STYLE, TARGET_STYLE = "green", "bold"


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


# ---------------------------------------------------------------------------- JSON
def result_json(result: Result, tokenizer, rounds: bool) -> dict:
    out = {"tokens": result.tokens, "text": tokenizer.decode(result.tokens), "metrics": result.stats.as_dict()}
    if rounds:
        out["rounds"] = [{"drafted": r.drafted, "accepted": r.accepted, "emitted": r.emitted,
                          **({"depth": r.depth} if r.depth is not None else {})} for r in result.rounds]
    return out


def generation_json(gen, pair) -> dict:
    out = {"card": pair.card.name, "prompt": gen.prompt, "prompt_tokens": len(gen.prompt_ids), "k": gen.k,
           "draft": pair.draft.name, "device": str(pair.device), "dtype": pair.dtype_name,
           "quantize": pair.card.quantize, "shapes": pair.shapes, "tree": pair.trees, "forward_policy": pair.policy.as_dict(),
           "greedy_form": pair.policy.form(1, pair.greedy_width(gen.k)), "greedy_width": pair.greedy_width(gen.k)}
    if pair.dtype_choice is not None:
        out["dtype_choice"] = pair.dtype_choice.as_dict()
    if gen.sampled:
        c = pair.card
        out["sampling"] = {"temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p, "seed": c.seed}
    if gen.spec:
        out["spec"] = result_json(gen.spec, pair.tokenizer, rounds=True)
    if gen.greedy:  # the target alone: plain sampling ("sample") when sampling
        out["sample" if gen.sampled else "greedy"] = result_json(gen.greedy, pair.tokenizer, rounds=False)
    if gen.spec and gen.greedy:
        out["identical"] = gen.identical
        out["speedup"] = gen.speedup
    out["peak_rss_mb"] = gen.peak_rss_mb
    if pair.costs is not None:
        out["cost_profile"] = pair.costs.as_dict()
    return out


def batch_summary_json(summary) -> dict:
    """The last line of a batched --prompts-file run: throughput over the whole run per mode."""
    from specdec_cli.engine.memory import peak_rss_mb

    return {"summary": {**summary.as_dict(), "peak_rss_mb": peak_rss_mb()}}


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
    tree = any(r.depth is not None for r in result.rounds)  # a token tree: its depth beside its nodes
    for col in ("round", "drafted", *(["depth"] if tree else []), "accepted", "emitted", "text"):
        table.add_column(col, justify="right" if col != "text" else "left")
    i = 0
    for n, r in enumerate(result.rounds, 1):
        piece = tokenizer.decode(result.tokens[i : i + r.emitted])
        depth = [fmt(r.depth, "d")] if tree else []
        table.add_row(str(n), str(r.drafted), *depth, str(r.accepted), str(r.emitted), repr(piece)[1:-1])
        i += r.emitted
    return table


def summary_table(gen, pair) -> Table:
    c = pair.card
    sampling = f" · T={c.temperature} top-k={c.top_k} top-p={c.top_p} seed={c.seed}" if gen.sampled else ""
    table = Table(title=f"card {pair.card.name} · draft {pair.draft.name} · k={gen.k} · {pair.device}{sampling}",
                  title_justify="left")
    table.add_column("metric")
    alone = "plain sampling" if gen.sampled else "greedy"
    cols = [(name, res) for name, res in ((alone, gen.greedy), ("speculative", gen.spec)) if res]
    for name, _ in cols:
        table.add_column(name, justify="right")
    rows = [("tokens", lambda s: str(s.tokens)),
            ("verify rounds", lambda s: str(s.verify_rounds)),
            ("drafted/round", lambda s: fmt(s.drafted / s.verify_rounds if s.verify_rounds else None)),
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
        if gen.sampled:  # two independent samples: equal tokens are not expected, equal distributions are
            table.add_row("identical", "", f"{'yes' if gen.identical else 'no'} [dim](sampling: not expected)[/]")
        else:
            table.add_row("identical", "", "[green]yes[/]" if gen.identical else "[red]NO[/]")
    if pair.costs is not None and gen.spec:
        table.caption, table.caption_justify = cost_caption(pair.costs, gen.k), "left"
    return table


def cost_caption(profile, k: int) -> str:
    """One line on what the cost schedule priced rounds with (measured on this machine)."""
    where = "cached" if profile.cached else f"measured in {profile.measured_s:.1f} s"
    curve = " ".join(f"{v:.2f}" for v in profile.curve(profile.contexts[0])[: k + 1])
    drafts = ", ".join(f"{name} c={profile.c(name):.2f}" for name in profile.draft_s) or "draft makes no model call (c=0)"
    major = "LM head's W @ xᵀ" if profile.packed else "W @ xᵀ"  # the packed world's head keeps its plain weight
    forms = [(name, [n for n in ns if n <= k + 1]) for name, ns in (("prepacked", profile.packed),
                                                                     (major, profile.weight_major))]
    matmuls = "".join(f"; {name} matmuls at n = {','.join(map(str, ns))}" for name, ns in forms if ns)
    padded = f"; a plain step runs {profile.width(1)} wide (cheaper)" if profile.width(1) > 1 else ""
    spreads = sorted(x for row in profile.spread for x in row[: k + 1])
    spread = "" if not spreads else (f"; timed tries spread {spreads[len(spreads) // 2]:.0%} (median), "
                                     f"{spreads[-1]:.0%} (widest)" + (" (busy machine: not cached)" if profile.busy else ""))
    return (f"cost profile ({where}): target step {profile.step_s * 1e3:.1f} ms; verify cost v(n), n=1..{k + 1}, "
            f"in steps: {curve}{matmuls}{padded}; {drafts}{spread}")


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
    if gen.diverged:
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


def sampling_table(checks, title: str) -> Table:
    """verify-exactness at temperature > 0: one chi-square test per row."""
    table = Table(title=title, title_justify="left", caption_justify="left", caption=(
        "tokens: the test is on the joint distribution of the first j generated tokens; N: speculative draws "
        "(and as many plain ones); vs: the exact distribution or plain sampling; bins: outcomes with expected "
        "count >= 5, the rest pooled; chi2 on bins - 1 df; pass: p >= alpha / tests (Bonferroni)"))
    for col in ("prompt", "draft", "k", "tokens", "N", "vs", "bins", "chi2", "p-value", "accept rate",
                "tokens/round", "pass"):
        table.add_column(col, justify="left" if col in ("prompt", "draft", "vs") else "right")
    for c in checks:
        t = c.test
        table.add_row(c.id, c.draft, str(c.k), str(c.positions), str(c.samples), c.reference, str(t.bins),
                      fmt(t.statistic, ".1f"), fmt(t.p_value, ".3g"), fmt(c.stats.accept_rate, ".1%"),
                      fmt(c.stats.tokens_per_round), _pass(c.passed))
    return table


def _pass(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[red]NO[/]"


# ---------------------------------------------------------------------------- cards
def cards_table(cards) -> Table:
    table = Table(title="Built-in cards", title_justify="left")
    for col in ("name", "target", "draft", "description"):
        table.add_column(col)
    for c in cards:
        table.add_row(c.name, c.target, c.draft.label(), c.description)
    return table


# ---------------------------------------------------------------------------- bench
def bench_json(row, context: dict) -> dict:
    """One bench row (a prompt, a category or all prompts, for one configuration) as JSON, with
    the process's peak resident memory so far (the loaded pair, caches, torch)."""
    from specdec_cli.engine.memory import peak_rss_mb

    return {**context, **row.as_dict(), "peak_rss_mb": peak_rss_mb()}


def bench_csv(rows, context: dict) -> str:
    """Every row as CSV: the union of the rows' fields, blank where a row has none."""
    import csv
    import io

    dicts = [bench_json(r, context) for r in rows]
    columns = list(dict.fromkeys(key for d in dicts for key in d))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(dicts)
    return buffer.getvalue()


def _yes(ok: bool | None) -> str:
    """None: not applicable (sampled outputs are not expected to match token for token)."""
    return "[dim]n/a[/]" if ok is None else "[green]yes[/]" if ok else "[red]NO[/]"


def _column_table(cols, rows, **table) -> Table:
    """A Rich table of bench rows, one column per definition in eval/columns.py (the pages print
    the same), the overall row's label bold and a section line under it."""
    out = Table(title_justify="left", caption_justify="left", **table)
    for c in cols:
        out.add_column(c.header, justify="right" if c.numeric else "left")
    labelled = any(c.label for c in cols)
    for row in rows:
        d = row.as_dict()
        overall = labelled and d["scope"] == "all"
        out.add_row(*(_yes(c.get(d)) if c.verdict else f"[bold]{c.cell(d, '-')}[/]" if c.label and overall
                      else c.cell(d, "-") for c in cols), end_section=overall)
    return out


BENCH_TABLE = (columns.CATEGORY, columns.PROMPTS, columns.TOKENS, columns.DRAFTED_PER_ROUND, columns.ACCEPT_RATE,
               columns.TOKENS_PER_ROUND, columns.PREDICTED_TOKENS_PER_ROUND, columns.VERIFY_ROUNDS,
               columns.GREEDY_TOKENS_PER_S, columns.TOKENS_PER_S, columns.SPEEDUP, columns.PREDICTED_SPEEDUP,
               columns.IDENTICAL)  # the pages' per-category table and predicted tokens/round


def bench_table(rows, title: str) -> Table:
    """Greedy vs speculative per prompt category, then over all prompts (one configuration)."""
    return _column_table(BENCH_TABLE, rows, title=title,
                         caption="tok/s and speedup: median over repeats per prompt, summed over prompts; "
                                 "speedup = greedy time / speculative time for the same tokens.\n"
                                 "predicted: the cost model's expectation for the proposals actually made "
                                 "(measured per-position acceptance, measured verify and draft costs)")


# Two headers differ from the pages' sweep: a narrower theory column, and predicted speedup named
# apart from predicted tok/round, which the pages' sweep does not show.
SWEEP_TABLE = (columns.SWEEP_DRAFT, columns.AGREE, columns.K, columns.ACCEPT_RATE, columns.AGREEMENT_EST,
               columns.TOKENS_PER_ROUND, columns.VERIFY_ROUNDS, columns.TOKENS_PER_S, columns.SPEEDUP,
               replace(columns.THEORY_TOKENS_PER_ROUND, header="theory tok/round"), columns.THEORY_SPEEDUP,
               columns.PREDICTED_TOKENS_PER_ROUND, replace(columns.PREDICTED_SPEEDUP, header="predicted speedup"),
               columns.VERIFY_COST,
               columns.Column("c", lambda r: f"{r['draft_cost']:.2f}" + (" sim" if r["draft_cost_simulated"] else "")),
               columns.IDENTICAL)


def sweep_table(rows, title: str) -> Table:
    """One row per configuration over all prompts: measured beside the predictions."""
    return _column_table(SWEEP_TABLE, rows, title=title, caption=(
        "a set: the synthetic draft's agreement (proposes the target's greedy token with probability a). "
        "a meas.: accepted / (accepted + rejected rounds), the per-token agreement estimate; "
        "accept rate: accepted / drafted.\n"
        "theory (Leviathan et al. 2023, a prediction, not a bound) at a set, k proposals every round: "
        "tokens/round = (1-a^(k+1))/(1-a); speedup = that / (k·c + v), v = measured (k+1)-token verify "
        "cost, c = draft step cost (measured for model drafts, 0 when the draft makes no model call, "
        "'sim' = simulated by --draft-cost), both in 1-token target steps.\n"
        "predicted: the same cost model fed the proposals actually made and the measured per-position "
        "acceptance (so it also covers the card's draft, whose schedule varies the proposal length)."))


def peer_table(rows, title: str) -> Table:
    """specdec vs transformers' own generate, same prompts, same process."""
    return _column_table(columns.PEER_TABLE, rows, title=title, caption=(
        "ratio = specdec tok/s / transformers tok/s (> 1: specdec faster); assisted: transformers at a fixed "
        "k, specdec under the card's schedule (at most k per round); target forwards include the prefill; "
        "identical: transformers' output == specdec's == the greedy reference"))


# ---------------------------------------------------------------------------- plan
def plan_table(rows, profile, title: str) -> Table:
    """plan's predictions, one row per draft x k x schedule, best marked."""
    table = Table(title=title, title_justify="left", caption_justify="left", caption=(
        "alpha_j: teacher-forced acceptance of proposal j given 1..j-1 were, along the target's own greedy "
        "continuations; tokens/round: exact for the replayed rounds; predicted speedup = tokens / "
        "sum over rounds of (d·c + v(d+1)), in 1-token target steps; pinned shapes (bitwise-exact in any dtype) "
        "pay v(k+1) every round, against free-shape greedy; a tree row's k is its nodes.\n" + cost_caption(profile, max(r.k for r in rows))))
    for col in ("draft", "schedule", "k", "drafted/round", "alpha by position", "tokens/round", "c",
                "predicted speedup", "pinned", ""):
        table.add_column(col, justify="left" if col in ("draft", "schedule", "alpha by position", "") else "right")
    for r in rows:
        alphas = " ".join(f"{a:.2f}" for a in r.alpha_by_position[: r.k]) or "-"
        table.add_row(r.label, r.schedule, str(r.k) if r.k else "-",
                      fmt(r.drafted / r.verify_rounds if r.verify_rounds else None), alphas,
                      fmt(r.predicted_tokens_per_round), fmt(r.draft_cost), f"{fmt(r.predicted_speedup)}x",
                      f"{fmt(r.pinned_speedup)}x", "[bold green]recommended[/]" if r.recommended else "")
    return table


def show_table(console: Console, table) -> None:
    """On a terminal Rich fits the table to the window; in a file or pipe print it at its
    natural width instead of cutting every cell down to 80 columns."""
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    Console(file=console.file, width=max(console.width, natural)).print(table)


# ---------------------------------------------------------------------------- distill
class DistillReport:
    """Renders distill's progress: a Rich bar per phase on a terminal, else one line per
    held-out measurement (logs)."""

    PHASES = {"prompts": "writing prompts", "data": "generating data", "teacher": "teacher pass", "train": "training",
              "done": "training"}

    def __init__(self, bar, console: Console):
        self.bar, self.console, self.tasks, self.last = bar, console, {}, None

    def __call__(self, p) -> None:
        alpha = " ".join(f"{a:.2f}" for a in p.alpha)
        info = {"prompts": f"{p.prompts} requests", "data": f"{p.prompts} prompts · {p.tokens:,} tokens",
                "teacher": f"{p.done:.0f}/{p.total:.0f} sequences"}.get(
            p.phase, f"step {p.step} · loss {'–' if p.loss is None else f'{p.loss:.3f}'} · α {alpha} · "
                     f"{p.tokens:,} tokens seen")
        name = self.PHASES[p.phase]
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=p.total, info=info)
        self.bar.update(self.tasks[name], completed=p.done if p.phase != "done" else p.total, total=p.total, info=info)
        if not self.console.is_terminal and p.phase == "train" and p.alpha != self.last:
            self.last = p.alpha
            self.console.print(f"{name}: {info}", markup=False, highlight=False, soft_wrap=True)
