"""Shapes, dtypes and compiled forwards: exactness pinned vs free (exactness.jsonl,
benchmarks/exactness.sh), bfloat16 speed under pinned shapes (bf16.jsonl) and compiled forwards
against eager ones (compile.jsonl, benchmarks/compile.sh), with the closing note's exactness lines.
"""

from __future__ import annotations

from dataclasses import replace

from report_common import Folder, column_table
from report_machine import UNKNOWN

from specdec_cli.eval import columns as c
from specdec_cli.eval.columns import Column


def greedy_speed(wall: str):
    """tok/s of one of the two timed greedy runs (pinned shapes: `pinned_greedy_wall_s` or `free_greedy_wall_s`)."""
    return lambda r: r["baseline_tokens"] / r[wall] if r.get(wall) else None


BF16_TABLE = (c.DRAFT, c.K, c.PROMPTS, c.TOKENS,
              Column("pinned greedy tok/s", greedy_speed("pinned_greedy_wall_s"), ".1f"),
              Column("free greedy tok/s", greedy_speed("free_greedy_wall_s"), ".1f"),
              replace(c.TOKENS_PER_S, header="speculative tok/s"), c.TOKENS_PER_ROUND, c.SPEEDUP,
              Column("baseline", lambda r: r.get("baseline", "greedy"), numeric=False), c.IDENTICAL)


def bf16_section(folder: Folder) -> list[str]:
    """bench in bfloat16 (pinned shapes): speculative against the faster of pinned and free greedy."""
    rows = [r for r in folder.rows("bf16") if r.get("row") == "bench" and r["scope"] == "all"]
    if not rows:
        return []
    return ["", "## bfloat16 speed, pinned shapes", "",
            "`bench --dtype bfloat16` (shapes auto: pinned). Both greedy runs are timed: pinned greedy at the "
            "same width (the exactness reference) and free-shape greedy (what a user would otherwise run); "
            "the speedup is against the faster of the two, named in `baseline`.", "",
            column_table(BF16_TABLE, rows)]


def of_mode(compiled: bool, column: Column) -> Column:
    """`column` of a workload's eager or compiled run (– where that run is missing)."""
    name = "compiled" if compiled else "eager"
    return replace(column, header=f"{name} {column.header}",
                   get=lambda w: column.get(w["runs"][compiled]) if compiled in w["runs"] else None)


# A row here is one workload: {"workload", "first": its compiled run or else its eager one, "runs": {compiled: row}}.
COMPILE_TABLE = (Column("workload", lambda w: w["workload"], numeric=False),
                 Column("draft", lambda w: w["first"]["draft"], numeric=False), Column("k", lambda w: w["first"]["k"]),
                 Column("prompts", lambda w: w["first"]["prompts"]),
                 *(of_mode(mode, col) for mode in (False, True)
                   for col in (c.GREEDY_TOKENS_PER_S, c.TOKENS_PER_S, c.SPEEDUP)),
                 Column("identical", lambda w: all(r["identical"] for r in w["runs"].values()), verdict=True))


def compile_section(folder: Folder) -> list[str]:
    """benchmarks/compile.sh: each workload eager, then with --compile, back to back."""
    rows = [r for r in folder.rows("compile") if r.get("row") == "bench" and r["scope"] == "all" and "workload" in r]
    if not rows:
        return []
    runs: dict[str, dict[bool, dict]] = {}
    for r in rows:
        runs.setdefault(r["workload"], {})[bool(r.get("compiled"))] = r
    workloads = [{"workload": w, "first": m.get(True) or m[False], "runs": m} for w, m in runs.items()]
    return ["", "## Compiled forwards (`--compile`) against eager ones", "",
            "`bash benchmarks/compile.sh`: each workload runs eager, then with `--compile` (inductor, frozen weights, "
            "every width 1..k+1 compiled before the clock starts: docs/kernels.md), back to back in separate "
            "processes. Greedy and speculative are the same mode's: the compiled speedup is against compiled greedy."
            + (f" Commit measured: `{'`, `'.join(sorted({r['commit'] for r in rows if r.get('commit')}))}`."
               if any(r.get("commit") for r in rows) else ""),
            "",
            column_table(COMPILE_TABLE, workloads)]


def exactness_groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(card, dtype, shapes, batch) -> exactness.sh's records, in file order."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if "identical" in r and "k" in r:
            out.setdefault((r.get("card", UNKNOWN), r.get("dtype", UNKNOWN), r.get("shapes", UNKNOWN), r.get("batch", 1)),
                           []).append(r)
    return out


def divergences(records: list[dict], most: int = 3) -> str:
    """The first token divergences: `id` k @position, the first few."""
    apart = [r for r in records if not r["identical"]]
    if not apart:
        return "none"
    words = [f"`{r['id']}` k={r['k']} @{(r.get('first_divergence') or {}).get('index', '?')}" for r in apart[:most]]
    return ", ".join(words) + (f" (+{len(apart) - most} more)" if len(apart) > most else "")


def logit_differences(records: list[dict]) -> str:
    compared = [r for r in records if r.get("bitwise") is not None]
    apart = [r["bitwise_divergence"] for r in compared if r["bitwise"] is False and r.get("bitwise_divergence")]
    if not compared:
        return "–"
    if not apart:
        return "none"
    return (f"first at position {min(a['index'] for a in apart)}, largest difference "
            f"{max(a.get('max_abs_diff_all', a['max_abs_diff']) for a in apart):.3g}")


def joined(values) -> str:
    return ",".join(map(str, dict.fromkeys(values)))


def bitwise_equal(records: list[dict]) -> str | None:
    compared = [r for r in records if r.get("bitwise") is not None]
    return f"{sum(r['bitwise'] is True for r in compared)}/{len(compared)}" if compared else None


# A row here is one exactness group: ((card, dtype, shapes, batch), its records).
EXACTNESS_TABLE = (
    Column("card", lambda g: g[0][0], numeric=False),
    Column("dtype", lambda g: g[0][1], numeric=False),
    Column("shapes", lambda g: g[0][2], numeric=False),
    Column("batch", lambda g: g[0][3]),
    Column("k", lambda g: joined(r["k"] for r in g[1])),
    Column("threads", lambda g: joined(r.get("threads", "–") for r in g[1])),
    Column("records", lambda g: len(g[1])),
    Column("identical", lambda g: f"{sum(bool(r['identical']) for r in g[1])}/{len(g[1])}"),
    Column("bitwise-equal logits", lambda g: bitwise_equal(g[1])),
    Column("first token divergences", lambda g: divergences(g[1]), numeric=False),
    Column("logit differences", lambda g: logit_differences(g[1]), numeric=False),
)


def exactness_section(folder: Folder) -> list[str]:
    groups = exactness_groups(folder.rows("exactness"))
    if not groups:
        return []
    dtypes = list(dict.fromkeys(key[1] for key in groups))
    return ["", f"## Exactness in {', '.join(dtypes)}: pinned vs free shapes", "",
            "`bash benchmarks/exactness.sh` (`exactness.jsonl`; a script of its own, not part of the command above): "
            "`specdec verify-exactness --bitwise` per card, with pinned shapes at `--batch 1` and `--batch N`, and in "
            "free shapes at batch 1 as the contrast ([docs/shapes.md](../../docs/shapes.md)). A record is one prompt "
            "at one k. `identical`: the speculative tokens equal the target's greedy decode (under pinned shapes, "
            "greedy at the same width k + 1); `bitwise`: the target's logits equal bit for bit at every emitted "
            "position up to the first token divergence. Under pinned shapes any difference is a failure; in free "
            "shapes a difference is the contrast, what an engine shows without pinning. `threads`: the run's "
            "OMP_NUM_THREADS (its own, whatever the machine line says).", "",
            column_table(EXACTNESS_TABLE, groups.items())]


def exactness_closing(folder: Folder) -> list[str]:
    rows, lines = folder.rows("exactness"), []
    for shapes in ("pinned", "free"):
        records = [r for key, group in exactness_groups(rows).items() if key[2] == shapes for r in group]
        compared = [r for r in records if r.get("bitwise") is not None]
        dtypes = ", ".join(dict.fromkeys(r.get("dtype", UNKNOWN) for r in records))
        if records:
            lines.append(f"- Exactness, {shapes} shapes ({dtypes}): "
                         f"**{sum(bool(r['identical']) for r in records)}/{len(records)}** identical, "
                         f"{sum(r['bitwise'] is True for r in compared)}/{len(compared)} with bitwise-equal logits.")
    return lines

