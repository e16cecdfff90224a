"""What the peers' sections share (report_llamacpp.py, report_vllm.py): specdec's own run of the
same card, prompt and token budget to set a peer's run beside, how the page says where a peer's
file came from, and how a text comparison is written.
"""

from __future__ import annotations

import re

from report_common import Folder, bench_rows


def specdec_prompts(folder: Folder) -> dict[tuple[str, str, int], dict]:
    """(card, prompt id, max tokens) -> specdec's bench row for that prompt: the README example
    (readme.jsonl) and the suite's prompts (bench.jsonl), each in the dtype its card chose (`dtype`)."""
    rows = bench_rows(folder.rows("bench"), "prompt") + bench_rows(folder.rows("readme"), "prompt")
    return {(r["card"], r["name"], r["max_tokens"]): r for r in rows}


def ours_for(run: dict, ours: dict[tuple[str, str, int], dict]) -> dict | None:
    """specdec's row for a peer's run (None where specdec did not run that card on that prompt)."""
    return ours.get((run["card"], run["id"], run.get("max_tokens")))


def specdec_speed(mode: str, ours: dict | None) -> float | None:
    """specdec's tok/s (prefill included) beside a peer's run: greedy for greedy, else the card's speculative run."""
    return ours and (ours["greedy_tokens_per_s"] if mode == "greedy" else ours["tokens_per_s"])


def ratio(theirs: float | None, ours: float | None) -> float | None:
    return theirs / ours if theirs and ours else None


def same_text(a: str | None, b: str | None) -> str:
    return "not compared" if a is None or b is None else ("yes" if a == b else "**no**")


def peers_of(command: str) -> list[str]:
    """The peers a run.sh command names: PEERS=llamacpp,vllm -> ['llamacpp', 'vllm']."""
    m = re.search(r"\bPEERS=(\S+)", command)
    return m.group(1).split(",") if m else []


def made_by(folder: Folder, peer: str) -> str:
    """Whether this page's run made the peer's file, or it is from an earlier run."""
    if peer in peers_of(folder.command):
        return f"this run's command sets `PEERS={peer}`" if peers_of(folder.command) == [peer] else \
            f"this run's command has `{peer}` in `PEERS`"
    return (f"the command above does not set `PEERS={peer}`, so `{peer}.jsonl` is from an earlier run on this machine "
            "kind, beside this run's specdec figures")


def other_cpus(folder: Folder, runs: list[dict]) -> str:
    """A loud sentence where a peer's runs name a CPU other than this kind's."""
    cpus = sorted({r["cpu"] for r in runs if r.get("cpu")} - {folder.machine.get("cpu")})
    return f" **The runs name another CPU: {', '.join(cpus)}.**" if cpus else ""
