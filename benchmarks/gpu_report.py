"""benchmarks/gpu.sh's report: its raw step outputs -> OUT/gpu.jsonl, OUT/gpu.md and the summary line.

One record per configuration, each tagged with its step (setup, tests, exactness, timing). The
configurations come from gpu.sh's lists (passed as arguments), not from what ran: a
configuration whose command crashed, ran out of time or was skipped still gets its record,
with `error` saying why, so a short run cannot look like a clean one.

Plain standard library: it runs under whatever Python the GPU image has, before or without specdec.
Exit 0 when setup worked, every pinned record is identical and bitwise-equal, no GPU test failed
and every timing row is there with specdec's speculative == greedy (transformers' outputs may
differ from specdec's in bfloat16: shown, not failed); else 1. Prints only the summary line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# specdec's own dependencies, as pip names them: a `pip check` line about one of these is ours;
# the GPU image's other packages may disagree with the upgraded ones without touching specdec.
OURS = {"specdec", "transformers", "huggingface-hub", "hf-xet", "httpx2", "httpcore2", "truststore", "kernels",
        "tomlkit", "gguf", "tokenizers", "safetensors", "accelerate", "typer", "rich", "pyyaml", "numpy", "torch",
        "click", "anyio", "idna", "h11", "regex"}


# ---------------------------------------------------------------------------- reading a step
class Step:
    """One command gpu.sh ran (or skipped): its stdout, exit code, seconds and limit."""

    def __init__(self, work: Path, name: str):
        self.name = name
        self.out = work / f"{name}.out"
        skip = work / f"{name}.skip"
        self.skipped = skip.read_text().strip() if skip.exists() else None
        meta = (work / f"{name}.meta").read_text().split() if (work / f"{name}.meta").exists() else []
        self.rc, self.seconds, self.limit = (int(x) for x in meta) if meta else (None, None, None)

    @property
    def timed_out(self) -> bool:
        return self.rc in (124, 137)

    def lines(self) -> list[dict]:
        """The JSON objects the command printed (a line cut off by a kill is dropped)."""
        found = []
        for line in self.out.read_text(errors="replace").splitlines() if self.out.exists() else []:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                found.append(obj)
        return found

    def why_missing(self, log: str) -> str:
        """Why a configuration of this step has no result."""
        if self.skipped:
            return self.skipped
        if self.rc is None:
            return "not run"
        if self.timed_out:
            return f"{self.name}: out of time after {self.seconds} s (limit {self.limit} s)"
        return f"{self.name}: exit {self.rc}" + (f": {last_error(log, self.name)}" if last_error(log, self.name) else "")


def last_error(log: str, name: str) -> str | None:
    """The last `Error:` line (specdec's one-line errors) in the log section of step `name`."""
    section = log.split(f"== {name} (", 1)[1].split("\n== ", 1)[0] if f"== {name} (" in log else ""
    errors = [line.strip() for line in section.splitlines() if line.strip().startswith(("Error:", "ERROR:"))]
    return errors[-1][:300] if errors else None


def draft_kind(label: str) -> str:
    """'early-exit(layers=4)+cost' and 'early-exit:layers=4' -> 'early-exit'."""
    return re.match(r"[a-z-]+", label).group(0)


# ---------------------------------------------------------------------------- records per step
def setup_record(work: Path, log: str) -> dict:
    install, probe, check = Step(work, "install"), Step(work, "probe"), Step(work, "pipcheck")
    info = (probe.lines() or [{}])[-1]
    lines = check.out.read_text().splitlines() if check.out.exists() else []
    ours = [line for line in lines if canonical(line.split(" ")[0]) in OURS]
    status = "skipped" if install.skipped else ("ok" if install.rc == 0 else install.why_missing(log))
    ok = bool(info.get("ok")) and (install.skipped is not None or install.rc == 0)
    record = {"step": "setup", "ok": ok, "install": status, "install_s": install.seconds, **info,
              "pip_check": ours, "pip_check_other": len([x for x in lines if x.strip()]) - len(ours)}
    if not info:
        record["error"] = probe.why_missing(log)
    return record


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_records(work: Path, log: str, tests: list[str]) -> list[dict]:
    records = []
    for path in tests:
        step = Step(work, f"pytest-{Path(path).stem}")
        xml = work / f"{step.name}.xml"
        record = {"step": "tests", "file": path, "seconds": step.seconds}
        if not xml.exists():
            records.append({**record, "outcome": "error", "error": step.why_missing(log)})
            continue
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        failed = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            if case.find("skipped") is not None:
                counts["skipped"] += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
                failed.append(case.get("name"))
            else:
                counts["passed"] += 1
        outcome = ("failed" if counts["failed"] or step.rc not in (0, 5) else
                   "passed" if counts["passed"] else "skipped")
        records.append({**record, "outcome": outcome, **counts, "failures": failed})
    return records


def exactness_records(work: Path, log: str, a) -> list[dict]:
    prompts = [json.loads(line)["id"] for line in (work / "prompts.jsonl").read_text().splitlines() if line.strip()]
    records = []
    for shapes in a.shapes:
        for batch, n in zip(a.batches, a.prompts):
            step = Step(work, f"exact-{shapes}-b{batch}")
            got = {(draft_kind(r["draft"]), r["k"], r["id"]): r for r in step.lines() if "draft" in r}
            for draft in a.drafts:
                for k in a.ks:
                    for pid in prompts[:n]:
                        tags = {"step": "exactness", "shapes": shapes, "batch": batch, "draft": draft, "k": k, "id": pid}
                        r = got.get((draft_kind(draft), k, pid))
                        if r is None:
                            records.append({**tags, "identical": None, "bitwise": None, "error": step.why_missing(log)})
                        else:
                            rest = {key: v for key, v in r.items() if key not in ("id", "k", "draft", "shapes")}
                            records.append({**tags, "draft_label": r["draft"], **rest,
                                            "bitwise_divergence": r.get("bitwise_divergence")})
    return records


def timing_records(work: Path, log: str, a) -> list[dict]:
    step = Step(work, "bench")
    rows = [r for r in step.lines() if r.get("scope") == "all"]
    wanted = [("bench", f"synthetic(agree={x})", lambda r, x=x: r["row"] == "bench" and r.get("agree") == x)
              for x in a.agrees]
    wanted += [("bench", "card draft", lambda r: r["row"] == "bench" and r.get("agree") is None),
               ("transformers", "greedy", lambda r: r["row"] == "transformers" and r.get("mode") == "greedy"),
               ("transformers", "assisted", lambda r: r["row"] == "transformers" and r.get("mode") == "assisted")]
    records = []
    for row, what, match in wanted:
        found = [r for r in rows if match(r)]
        tags = {"step": "timing", "row": row, "config": what}
        records.append({**tags, **found[0]} if found else {**tags, "error": step.why_missing(log)})
    return records


# ---------------------------------------------------------------------------- markdown
def fmt(x, digits=2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(a, setup: dict, tests: list[dict], exact: list[dict], timing: list[dict]) -> str:
    where = setup.get("gpu") or "CPU"
    out = [f"## GPU path: {a.card_name}, {a.dtype}, {where}", "",
           f"`{a.command}` (torch {setup.get('torch', '?')}, transformers {setup.get('transformers', '?')}, "
           f"python {setup.get('python', '?')}; {a.seconds} s in all). Exactness: {len(a.drafts)} drafts x "
           f"k in {{{','.join(map(str, a.ks))}}} x each prompt, at most {a.exact_tokens} tokens; timing: "
           f"{a.bench_prompts} prompts x {a.bench_tokens} tokens, median of {a.bench_repeats} after a warm-up.", "",
           "| shapes | batch | prompts | configurations | tokens identical | logits bitwise | errors |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for shapes in a.shapes:
        for batch, n in zip(a.batches, a.prompts):
            rs = [r for r in exact if r["shapes"] == shapes and r["batch"] == batch]
            out.append(f"| {shapes} | {batch} | {n} | {len(rs)} | {sum(r['identical'] is True for r in rs)} | "
                       f"{sum(r['bitwise'] is True for r in rs)} | {sum('error' in r for r in rs)} |")
    diverged = [r for r in exact if r.get("first_divergence")]
    if diverged:
        out += ["", "Token divergences (first position; the target's top-2 margin there):", ""]
        for r in diverged[:12]:
            d = r["first_divergence"]
            out.append(f"- {r['shapes']}, batch {r['batch']}, {r['draft']} k={r['k']}, {r['id']}: token "
                       f"{d.get('index')}, greedy {d.get('greedy_token')} vs speculative {d.get('spec_token')}, "
                       f"margin {fmt(d.get('margin'), 4)}")
        if len(diverged) > 12:
            out.append(f"- and {len(diverged) - 12} more (gpu.jsonl)")
    errors = sorted({r["error"] for r in exact + timing + tests if r.get("error")})
    if errors:
        out += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    out += ["", "| configuration | k | tokens/s | x greedy (specdec) | accept rate | tokens/round |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    greedy = next((r.get("greedy_tokens_per_s") for r in timing if r["row"] == "bench" and "error" not in r), None)
    out.append(f"| greedy ({next((r.get('baseline') for r in timing if r.get('baseline')), 'greedy')}) | – | "
               f"{fmt(greedy, 1)} | 1.00 | – | 1.00 |")
    for r in timing:
        if r["row"] == "bench":
            out.append(f"| {r.get('draft', r['config'])} | {r.get('k', '–')} | {fmt(r.get('tokens_per_s'), 1)} | "
                       f"{fmt(r.get('speedup'))} | {fmt(r.get('accept_rate'))} | {fmt(r.get('tokens_per_round'))} |")
    out += ["", "| transformers | its tokens/s | specdec's tokens/s | specdec / transformers | same tokens |",
            "| --- | ---: | ---: | ---: | --- |"]
    for r in timing:
        if r["row"] == "transformers":
            label = "generate (greedy)" if r["config"] == "greedy" else f"assisted ({r.get('draft', '?')}, k={r.get('k')})"
            out.append(f"| {label} | {fmt(r.get('hf_tokens_per_s'), 1)} | {fmt(r.get('tokens_per_s'), 1)} | "
                       f"{fmt(r.get('ratio'))} | {'–' if 'error' in r else 'yes' if r.get('identical') else 'no'} |")
    out += ["", "GPU tests: " + "; ".join(f"`{r['file']}` {r['outcome']}" + (
        f" ({r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped)" if "passed" in r else "")
        for r in tests), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------- summary
def summary(a, setup: dict, tests: list[dict], exact: list[dict], timing: list[dict]) -> tuple[str, bool]:
    parts = []
    if not setup["ok"]:
        parts.append(f"setup FAILED ({setup.get('error') or setup['install']})")
    for shapes in a.shapes:
        rs = [r for r in exact if r["shapes"] == shapes]
        errs = sum("error" in r for r in rs)
        if shapes == "pinned":
            text = f"pinned {sum(r['identical'] is True and r['bitwise'] is True for r in rs)}/{len(rs)} bitwise"
        else:
            text = (f"{shapes} {sum(r['identical'] is True for r in rs)}/{len(rs)} identical"
                    f" ({sum(r['bitwise'] is True for r in rs)} bitwise)")
        parts.append(text + (f" ({errs} errors)" if errs else ""))
    parts[-len(a.shapes)] = "exactness " + parts[-len(a.shapes)]
    for r in tests:
        name = "sync test" if "sync" in r["file"] else "gpu tests"
        detail = " (no CUDA)" if r["outcome"] == "skipped" else (
            f" ({r['failed']}/{r['passed'] + r['failed']})" if r["outcome"] == "failed" else "")
        parts.append(f"{name} {r['outcome']}{detail}")
    card = next((r for r in timing if r["config"] == "card draft" and "error" not in r), None)
    assisted = next((r for r in timing if r["config"] == "assisted" and "error" not in r), None)
    if card or assisted:
        parts.append(f"spec {fmt(card and card.get('speedup'), 1)}x greedy, "
                     f"{fmt(assisted and assisted.get('ratio'), 1)}x assisted")
    missing = sum("error" in r for r in timing)
    if missing:
        parts.append(f"timing {missing}/{len(timing)} missing")
    pinned_ok = all(r["identical"] is True and r["bitwise"] is True for r in exact if r["shapes"] == "pinned")
    ok = (setup["ok"] and pinned_ok and not any(r["outcome"] in ("failed", "error") for r in tests)
          and not missing and all(r.get("identical") is not False for r in timing if r["row"] == "bench"))
    minutes, seconds = divmod(a.seconds, 60)
    return f"gpu.sh: {'; '.join(parts)}; {minutes}m{seconds:02d}s", ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--card", required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--shapes", type=str.split, required=True)
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split()], required=True)
    p.add_argument("--prompts", type=lambda s: [int(x) for x in s.split()], required=True)
    p.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--drafts", type=str.split, required=True)
    p.add_argument("--agrees", type=lambda s: [float(x) for x in s.split(",")], required=True)
    p.add_argument("--tests", type=str.split, required=True)
    for name in ("exact-tokens", "bench-prompts", "bench-tokens", "bench-repeats", "seconds"):
        p.add_argument(f"--{name}", type=int, required=True)
    a = p.parse_args(argv)
    a.card_name = Path(a.card).stem
    log_path = a.out / "gpu.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""

    setup = {**setup_record(a.work, log), "mode": a.mode, "card": a.card_name, "dtype": a.dtype}
    tests = test_records(a.work, log, a.tests)
    exact = exactness_records(a.work, log, a)
    timing = timing_records(a.work, log, a)
    with open(a.out / "gpu.jsonl", "w") as f:
        for record in [setup, *tests, *exact, *timing]:
            f.write(json.dumps(record) + "\n")
    (a.out / "gpu.md").write_text(markdown(a, setup, tests, exact, timing))
    line, ok = summary(a, setup, tests, exact, timing)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
