"""Field checkers: a checker takes a value and returns what is wrong with it (None: nothing).

Cards (cards/card.py), draft kinds (drafts/*_kind.py) and command-line options (cli/requests.py) share them, so
a value is checked, and its error worded, the same way wherever it is given. `check` turns a
checker's objection into the one-line error: where, the field, the problem and the value.
"""

from __future__ import annotations

import math
from typing import Callable

from specdec_cli.errors import SpecdecError

Checker = Callable[[object], "str | None"]

DTYPE_NAMES = ("float32", "bfloat16", "float16")  # the dtypes a card or a draft may name (models.DTYPES: torch's)


def check(where: str, field: str, value, checker: Checker | None) -> None:
    """Raise a one-line error naming where, the field and the value when `checker` objects."""
    problem = checker(value) if checker else None
    if problem:
        raise SpecdecError(f"{where}: {field}: {problem}, got {value!r}")


def integer(lo: int, hi: int) -> Checker:
    def checker(v):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"must be an integer in {lo}..{hi}"
    return checker


def choice(options) -> Checker:
    def checker(v):
        if v not in options:
            return f"must be one of {', '.join(map(str, options))}"
    return checker


def text(v):
    if not isinstance(v, str) or not v.strip():
        return "must be a non-empty string"


def boolean(v):
    if not isinstance(v, bool):
        return "must be true or false"


def probability(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
        return "must be a number in [0, 1]"
