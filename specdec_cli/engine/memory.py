"""How much memory this process has held: the figure that says whether a pair fits a machine."""

from __future__ import annotations

import sys


def peak_rss_mb() -> float | None:
    """Peak resident set size of this process so far, in MB (2^20 bytes); None where the OS
    does not report it (Windows). It covers everything loaded: target, draft, caches, torch."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB; macOS: bytes
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)
