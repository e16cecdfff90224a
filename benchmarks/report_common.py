"""What every part of a page shares: a kind's folder and its JSON lines, markdown tables (built
from specdec's column definitions, specdec_cli/eval/columns.py, the ones `specdec bench` prints
in the terminal), and how a number is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from report_machine import UNKNOWN, load_machine

sys.path.append(str(Path(__file__).resolve().parent.parent))  # specdec_cli: installed, else this checkout's
from specdec_cli.eval.columns import Column  # noqa: E402


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def optional(directory: Path, name: str) -> list[dict]:
    path = directory / name
    return load(str(path)) if path.is_file() else []


def f(value, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else format(value, spec) + suffix


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def cells(columns: Sequence[Column], row) -> list[str]:
    """One row's cells in markdown: – where not measured, a failed check and the overall row's label in bold."""
    out = []
    for c in columns:
        text = c.cell(row)
        if c.verdict:
            text = "yes" if c.get(row) else "**NO**"
        elif c.label and row["scope"] == "all":
            text = f"**{text}**"
        out.append(text)
    return out


def column_table(columns: Sequence[Column], rows) -> str:
    return table([c.header for c in columns], [cells(columns, r) for r in rows])


def bench_rows(rows: list[dict], *scopes: str) -> list[dict]:
    """specdec's own rows (not transformers') of the given scopes, in file order."""
    return [r for r in rows if r["row"] == "bench" and r["scope"] in scopes]


def overall_row(rows: list[dict]) -> dict | None:
    """The first configuration's row over all prompts, if the run wrote one."""
    return next(iter(bench_rows(rows, "all")), None)


HALF = ("bfloat16", "float16")


def rounding_note(rows: list[dict]) -> str:
    """Why `identical` against transformers may read NO where the run was in bfloat16 or float16."""
    half = sorted({r.get("dtype") for r in rows} & set(HALF))
    if not half:
        return ""
    return (f" In {' and '.join(half)}, `identical` compares specdec's pinned-shape output with transformers' "
            "free-shape `generate`, which rounds its forwards otherwise from the first step on (docs/shapes.md): a "
            "NO there is that rounding, not speculation; specdec's exactness in that dtype is against its own "
            "pinned greedy (the exactness section).")


def against_transformers(row: dict) -> str:
    """A row's `identical` against transformers, with the rounding it differs by in bfloat16/float16."""
    if row["identical"]:
        return "yes"
    return f"NO ({row['dtype']}: transformers rounds free shapes)" if row.get("dtype") in HALF else "NO"


def err(predicted, measured) -> str:
    return "–" if predicted is None or not measured else f"{100 * (predicted / measured - 1):+.0f} %"


class Folder:
    """One kind's folder, benchmarks/results/<kind>/: its machine.json, the command and note the
    page names, and its JSON-lines files, each read once when a section first asks for it."""

    def __init__(self, directory: str | Path, command: str | None = None, note: str = ""):
        self.path = Path(directory)
        self.name = self.path.name
        self.machine = load_machine(self.path)
        self.command = command or self.machine.get("command") or UNKNOWN
        self.note = note or self.machine.get("note", "")  # a hand-written machine.json may say how its files were made
        self._read: dict[str, list[dict]] = {}

    def rows(self, stem: str) -> list[dict]:
        """<stem>.jsonl's lines; none when the run wrote no such file."""
        if stem not in self._read:
            self._read[stem] = optional(self.path, f"{stem}.jsonl")
        return self._read[stem]

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()
