"""Output files are written atomically: a temp file in the same folder, then a rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from specdec_cli import settings
from specdec_cli.errors import SpecdecError


def write_atomic(path: str | Path, write: Callable[[Path], None], what: str = "output") -> Path:
    """Call `write(tmp_path)` and rename the result over `path`: readers never see half a file.
    Refuses a directory; a failure leaves any old file untouched and no temp file behind."""
    path = Path(path)
    if path.is_dir():
        raise SpecdecError(f"{what} file {path} is a directory; give a file name")
    if not path.parent.exists():
        raise SpecdecError(f"{what} file {path}: folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the data is on disk before the name points at it
        os.chmod(tmp, _mode(path))  # mkstemp makes 0600; give the file the mode a plain write would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str, what: str = "output") -> Path:
    return write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"), what)


def _mode(path: Path) -> int:
    """An existing file keeps its permissions; a new one gets 0666 minus the umask."""
    if path.exists():
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def cache_dir(*parts: str) -> Path:
    """Where specdec keeps files for the user (cost profiles, fetched models):
    $XDG_CACHE_HOME/specdec, else ~/.cache/specdec. Not created here."""
    base = settings.cache_home()
    return base / "specdec" / Path(*parts) if parts else base / "specdec"
