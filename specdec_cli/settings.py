"""Every setting specdec reads from the environment, in one place (nothing else reads os.environ).

Read when asked, not at import, so a test (or a caller) that sets one sees it take effect:
    SPECDEC_DEBUG     set (non-empty): an internal error shows its traceback (guard.py)
    XDG_CACHE_HOME    where the user cache lives (files.cache_dir): default ~/.cache
    SPECDEC_PIP_ARGS  extra pip options for `specdec fetch`, split like a shell would (fetch.py)
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
