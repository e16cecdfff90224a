"""benchmarks/gpu.sh, proven by its --cpu mode: the same steps on tiny-llama, here, in about a minute.

The GPU run itself needs the lent machine; what can be checked without it is checked here: the
script runs end to end, prints its summary line last, writes one JSON record per configuration
(the count computed from the configuration lists the script declares), and the one `pip
download` command in its header that prepares the wheels is well-formed (parsed, never run).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu.sh"
LIMITS = ("SETUP", "SYNC", "EXACT", "BENCH", "TESTS")  # seconds per step (EXACT: per command)
SUMMARY = re.compile(r"^gpu\.sh: exactness pinned \d+/\d+ bitwise.*; \d+m\d\ds$")


def declared(mode: str) -> dict:
    """The script's configuration block, evaluated by bash for `mode`: name -> list of words."""
    text = SCRIPT.read_text()
    block = text[text.index("# >>> configurations"):text.index("# <<< configurations")]
    names = ["SHAPES", "BATCHES", "PROMPTS", "DRAFTS", "GPU_TESTS", "KS", "AGREES", *(f"LIMIT_{x}" for x in LIMITS)]
    show = "".join(f'echo "{n}=${{{n}[*]}}"; ' for n in names)
    out = subprocess.run(["bash", "-c", f"MODE={mode}; WORK=/nowhere\n{block}\n{show}"],
                         capture_output=True, text=True, check=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines())
    return {n: values[n].replace(",", " ").split() for n in names}


def expected_records(c: dict) -> dict[str, int]:
    """Records per step: setup 1, one per GPU test file, exactness shapes x drafts x k x every
    prompt checked at each batch, timing each agreement + the card's draft + transformers'
    greedy and assisted."""
    prompts = sum(int(n) for n in c["PROMPTS"])
    return {"setup": 1, "tests": len(c["GPU_TESTS"]),
            "exactness": len(c["SHAPES"]) * len(c["DRAFTS"]) * len(c["KS"]) * prompts,
            "timing": len(c["AGREES"]) + 3}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-out")
    start = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "--cpu", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    records = [json.loads(line) for line in (out / "gpu.jsonl").read_text().splitlines()]
    return r, records, out, time.monotonic() - start


def test_summary_line_is_last_and_alone(cpu_run):
    r, _, out, _ = cpu_run
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and SUMMARY.match(lines[-1]), (r.stdout, r.stderr[-2000:])
    assert "sync test skipped (no CUDA)" in lines[-1] and "spec " in lines[-1]
    assert (out / "gpu.md").read_text().startswith("## GPU path: tiny, bfloat16, CPU")


def test_one_record_per_configuration(cpu_run):
    _, records, _, _ = cpu_run
    c = declared("cpu")
    steps = [r["step"] for r in records]
    assert {s: steps.count(s) for s in set(steps)} == expected_records(c)
    exact = [(r["shapes"], r["batch"], r["draft"], r["k"], r["id"]) for r in records if r["step"] == "exactness"]
    assert len(set(exact)) == len(exact)  # each configuration once
    assert {(s, d, k) for s, _, d, k, _ in exact} == {(s, d, int(k)) for s in c["SHAPES"] for d in c["DRAFTS"]
                                                      for k in c["KS"]}
    for r in records:  # a result, or an error saying why there is none
        if r["step"] == "exactness":
            assert "error" in r or {"identical", "bitwise", "first_divergence", "bitwise_divergence"} <= set(r), r
        if r["step"] == "timing":
            assert "error" in r or "tokens_per_s" in r, r


def test_gpu_run_fits_its_sizing(cpu_run):
    """The GPU sizing the header states: 180 exactness records, and time limits summing to 7.5 min."""
    c = declared("gpu")
    assert expected_records(c)["exactness"] == 180
    limits = {x: int(c[f"LIMIT_{x}"][0]) for x in LIMITS}
    exact_commands = len(c["SHAPES"]) * len(c["BATCHES"])
    assert sum(limits.values()) + (exact_commands - 1) * limits["EXACT"] <= 450, limits
    _, _, _, seconds = cpu_run
    assert seconds < 120, f"--cpu took {seconds:.0f} s"


def test_cpu_run_is_clean(cpu_run):
    r, records, _, _ = cpu_run
    assert [x for x in records if "error" in x] == []
    assert all(x["identical"] and x["bitwise"] for x in records if x["step"] == "exactness" and x["shapes"] == "pinned")
    assert r.returncode == 0, r.stdout


def pip_download_command() -> str:
    """The one `pip download` command of the script's header, continuation lines joined."""
    header = SCRIPT.read_text().split("\nset -uo pipefail", 1)[0]
    lines = [line[1:].strip() for line in header.splitlines() if line.startswith("#")]
    starts = [i for i, line in enumerate(lines) if re.match(r"python3 -m pip download\b", line)]
    assert len(starts) == 1, "exactly one pip download command in the header"
    command, i = lines[starts[0]], starts[0]
    while command.endswith("\\"):
        i += 1
        command = command[:-1] + " " + lines[i]
    return command


def test_pip_download_command_is_well_formed():
    command = pip_download_command()
    subprocess.run(["bash", "-n", "-c", command], check=True)  # syntax only: nothing is downloaded
    words = shlex.split(command)
    assert words[:4] == ["python3", "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:"} <= set(words)
    assert words[words.index("-d") + 1] == "benchmarks/wheels"
    assert words[words.index("--python-version") + 1] == "3.12"  # the GPU image's Python
    pins = {}
    valued = {"-d", "--python-version", "--implementation", "--platform"}
    for before, word in zip(["download", *words[4:]], words[4:]):
        if not word.startswith("-") and before not in valued:
            req = Requirement(word)
            assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", word
            pins[req.name] = next(iter(req.specifier)).version
    # what specdec needs and the image lacks, at versions pyproject.toml accepts
    project = (ROOT / "pyproject.toml").read_text()
    for name in ("transformers", "gguf"):
        wanted = Requirement(re.search(rf'"({name}[^"]*)"', project).group(1))
        assert name in pins and wanted.specifier.contains(pins[name]), (name, pins.get(name), wanted)
    assert "torch" not in pins  # the image's CUDA build stays


def test_wheels_folder_is_ignored():
    r = subprocess.run(["git", "check-ignore", "-q", "benchmarks/wheels/x-1.0-py3-none-any.whl"], cwd=ROOT)
    assert r.returncode == 0
