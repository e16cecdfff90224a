"""Every setting specdec reads from the environment, in one place (nothing else reads os.environ).

Read when asked, not at import, so a test (or a caller) that sets one sees it take effect:
    SPECDEC_DEBUG     set (non-empty): an internal error shows its traceback (guard.py)
    XDG_CACHE_HOME    where the user cache lives (files.cache_dir): default ~/.cache
    SPECDEC_PIP_ARGS  extra pip options for `specdec fetch`, split like a shell would (fetch.py)
    TORCHINDUCTOR_CACHE_DIR  torch's own: where compiled graphs are kept; specdec sets it to its
                      cache unless the user named a place (kernels.compile_cache)
Everything else a run depends on comes from the card and the command line.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def debug() -> bool:
    """SPECDEC_DEBUG: show the traceback of an internal error instead of one line."""
    return bool(os.environ.get("SPECDEC_DEBUG"))


def cache_home() -> Path:
    """$XDG_CACHE_HOME, else ~/.cache (the user cache's parent folder)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")).expanduser()


def pip_args() -> list[str]:
    """SPECDEC_PIP_ARGS, split like a shell would (e.g. `--no-index --find-links DIR`)."""
    return shlex.split(os.environ.get("SPECDEC_PIP_ARGS", ""))


def compile_cache(not_named: set[Path]) -> Path | None:
    """TORCHINDUCTOR_CACHE_DIR where the user named a place: None when unset or one of
    `not_named` (inductor's default, which it writes into the variable itself, and places
    specdec set)."""
    named = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(named) if named and Path(named).absolute() not in not_named else None


def set_compile_cache(path: Path) -> None:
    """Point inductor at `path`: it reads the place from TORCHINDUCTOR_CACHE_DIR only."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
