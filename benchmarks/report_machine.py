"""The machine a kind's results were measured on: this machine's record for machine.json
(`python benchmarks/report.py --machine`), the kind's folder name (`--slug`), and the words a page
says about its machine, every field read from machine.json.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

UNKNOWN = "unknown"  # a machine.json field nobody recorded


def _cpuinfo() -> dict:
    """/proc/cpuinfo's first processor: {'model name': ..., 'vendor_id': ...}; empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _lscpu() -> dict:
    """lscpu's `Key: value` lines; empty where there is no lscpu."""
    if not shutil.which("lscpu"):
        return {}
    done = subprocess.run(["lscpu"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    pairs = (line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).resolve().parent)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def slug(cpu: str) -> str:
    """The kind's folder name from the CPU model: 'Intel(R) Xeon(R) Processor' -> 'intel-xeon-processor'."""
    name = re.sub(r"\((r|tm)\)", "", cpu.lower()).split("@")[0]  # no marks, no clock ('CPU @ 2.10GHz')
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or UNKNOWN


def cpu_model(lscpu: dict | None = None, cpuinfo: dict | None = None) -> str:
    """The CPU model name (lscpu's `Model name`, as /proc/cpuinfo's `model name`)."""
    lscpu = _lscpu() if lscpu is None else lscpu
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    return lscpu.get("Model name") or cpuinfo.get("model name") or platform.processor() or UNKNOWN


def machine_record(command: str = "") -> dict:
    """This machine and this run, for machine.json: what a figure measured here depends on."""
    import torch
    import transformers

    lscpu, cpuinfo = _lscpu(), _cpuinfo()
    config = torch.__config__.show()  # the build: BLAS_INFO=mkl, "CPU capability usage: AVX512"
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    capability = re.search(r"CPU capability usage: (\w+)", config)
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu": cpu_model(lscpu, cpuinfo),
        "vendor": lscpu.get("Vendor ID") or cpuinfo.get("vendor_id") or UNKNOWN,
        "cores": os.cpu_count(),
        "threads_per_core": int(lscpu["Thread(s) per core"]) if lscpu.get("Thread(s) per core", "").isdigit() else UNKNOWN,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),  # under the run's OMP_NUM_THREADS (THREADS)
        "blas": blas[1] if blas else UNKNOWN,
        "cpu_capability": capability[1] if capability else UNKNOWN,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or UNKNOWN,  # the code the run measured
        "dirty": UNKNOWN if dirty is None or commit is None else bool(dirty),  # tracked files changed since it
        "command": command,
    }


def load_machine(directory: Path) -> dict:
    path = directory / "machine.json"
    return json.loads(path.read_text()) if path.is_file() else {"cpu": f"{UNKNOWN} (no machine.json)"}


def known(value) -> bool:
    return value is not None and value != UNKNOWN


def commit_label(m: dict) -> str:
    """The measured code's commit, or, where not recorded, the commit that holds the results."""
    if known(m.get("commit")):
        return f"`{m['commit']}`" + (" (+ uncommitted changes)" if m.get("dirty") is True else "")
    return f"{UNKNOWN} (results in `{m['results_commit']}`)" if m.get("results_commit") else UNKNOWN


def blas_label(m: dict) -> str:
    blas, cap = m.get("blas", UNKNOWN), m.get("cpu_capability", UNKNOWN)
    return f"BLAS {blas}" + (f", {cap} kernels" if known(cap) else "")


def machine_line(m: dict, folder: str) -> str:
    """The one line every section opens with."""
    return (f"*Machine: {m.get('cpu', UNKNOWN)} ({m.get('vendor', UNKNOWN)}), {m.get('cores', UNKNOWN)} cores, "
            f"torch {m.get('torch', UNKNOWN)} on {m.get('torch_threads', UNKNOWN)} threads, {blas_label(m)} "
            f"([machine.json]({folder}/machine.json)).*")


def name_the_machine(lines: list[str], line: str) -> list[str]:
    """`line` under every section and subsection heading."""
    out = []
    for text in lines:
        out.append(text)
        if text.startswith(("## ", "### ")):
            out += ["", line]
    return out


def machine_bullets(m: dict, folder: str) -> list[str]:
    """The page's opening words on its machine and run, every field from machine.json."""
    lines = [
        f"- machine: **{m.get('cpu', UNKNOWN)}**, vendor {m.get('vendor', UNKNOWN)}, {m.get('cores', UNKNOWN)} cores "
        f"({m.get('threads_per_core', UNKNOWN)} threads per core), torch {m.get('torch', UNKNOWN)} on "
        f"{m.get('torch_threads', UNKNOWN)} threads ({blas_label(m)}, oneDNN {m.get('mkldnn', UNKNOWN)}), Python "
        f"{m.get('python', UNKNOWN)}, transformers {m.get('transformers', UNKNOWN)}; run {m.get('date', UNKNOWN)} at "
        f"commit {commit_label(m)} ([machine.json]({folder}/machine.json)).",
    ]
    if m.get("source"):
        lines.append(f"- how the machine is known: {m['source']}")
    return lines
