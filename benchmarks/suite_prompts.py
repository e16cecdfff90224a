"""The built-in suite's first N prompts of each category, as JSON lines for --prompts-file:

    python benchmarks/suite_prompts.py N [CATEGORIES]

N empty: every prompt; CATEGORIES (comma-separated): only those, in the suite's order. The one
prompt picker run.sh, exactness.sh and compile.sh share.
"""

from __future__ import annotations

import json
import sys

from specdec_cli.cards.prompts import SUITE, first_per_category


def lines(limit: int | None, categories: set[str] | None = None) -> list[str]:
    chosen = [p for p in SUITE if categories is None or p.category in categories]
    if limit is not None:
        chosen = first_per_category(chosen, limit)
    return [json.dumps({"id": p.id, "prompt": p.text, "category": p.category}) for p in chosen]


if __name__ == "__main__":
    args = sys.argv[1:]
    limit = int(args[0]) if args and args[0] else None
    print("\n".join(lines(limit, set(args[1].split(",")) if len(args) > 1 else None)))
