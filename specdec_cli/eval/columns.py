"""bench's figures as table columns, each defined once: a header, how to read the figure from a
row and how to write it. A row here is a bench row as `--json` prints it (BenchRow.as_dict(),
PeerRow.as_dict()), which is also a line of a results file, so render.py (Rich tables in the
terminal) and benchmarks/report.py (markdown pages) build the same figure's column from the same
definition. Styling is the renderer's: markup, the glyph for a missing value, how a verdict and
the overall row's label stand out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Column:
    header: str
    get: Callable[[Row], Any]  # the figure from a row; None: not measured
    spec: str = ""  # how a number is written (format spec); text is written as it is
    unit: str = ""  # after a number: "x", " %"
    numeric: bool = True  # a number (right-aligned in the terminal), else words
    verdict: bool = False  # a check (True, False, None: not compared): the renderer says yes or no
    label: bool = False  # names the row: the row over all prompts says "overall", and renderers emphasise it

    def cell(self, row: Row, none: str = "–") -> str:
        value = self.get(row)
        if value is None:
            return none
        return value if isinstance(value, str) else format(value, self.spec) + self.unit


def field(name: str) -> Callable[[Row], Any]:
    return lambda row: row[name]


def per_round(name: str) -> Callable[[Row], Any]:
    """A count over the verify rounds, e.g. drafted/round."""
    return lambda row: row[name] / row["verify_rounds"] if row["verify_rounds"] else None


def percent(name: str) -> Callable[[Row], Any]:
    return lambda row: None if row[name] is None else 100 * row[name]


def row_label(row: Row) -> str:
    return "overall" if row["scope"] == "all" else row["name"]


# ---------------------------------------------------------------------------- one configuration's rows
CATEGORY = Column("category", row_label, numeric=False, label=True)
PROMPT = Column("prompt", row_label, numeric=False, label=True)
PROMPTS = Column("prompts", field("prompts"))
TOKENS = Column("tokens", field("tokens"))
DRAFTED_PER_ROUND = Column("drafted/round", per_round("drafted"), ".2f")
ACCEPT_RATE = Column("accept rate", percent("accept_rate"), ".1f", " %")
TOKENS_PER_ROUND = Column("tokens/round", field("tokens_per_round"), ".2f")
PREDICTED_TOKENS_PER_ROUND = Column("predicted tok/round", field("predicted_tokens_per_round"), ".2f")
VERIFY_ROUNDS = Column("verify rounds", field("verify_rounds"))
GREEDY_TOKENS_PER_S = Column("greedy tok/s", field("greedy_tokens_per_s"), ".1f")
TOKENS_PER_S = Column("spec tok/s", field("tokens_per_s"), ".1f")
SPEEDUP = Column("speedup", field("speedup"), ".2f", "x")
PREDICTED_SPEEDUP = Column("predicted", field("predicted_speedup"), ".2f", "x")
IDENTICAL = Column("identical", field("identical"), verdict=True)

# ---------------------------------------------------------------------------- the sweep's configurations
SWEEP_DRAFT = Column("draft", lambda row: "synthetic" if row["agree"] is not None else row["draft"], numeric=False)
AGREE = Column("a set", lambda row: "card" if row["agree"] is None else row["agree"], ".2f")
K = Column("k", field("k"), "d")
AGREEMENT_EST = Column("a meas.", field("agreement_est"), ".2f")
THEORY_TOKENS_PER_ROUND = Column("theory tokens/round", field("theory_tokens_per_round"), ".2f")
THEORY_SPEEDUP = Column("theory speedup", field("theory_speedup"), ".2f", "x")
VERIFY_COST = Column("v", field("verify_cost"), ".2f")

# ---------------------------------------------------------------------------- specdec beside transformers
MODE = Column("mode", field("mode"), numeric=False)
DRAFT = Column("draft", lambda row: row["draft"] or None, numeric=False)  # "": plain greedy, no draft
PEER_TOKENS_PER_S = Column("specdec tok/s", field("tokens_per_s"), ".1f")
HF_TOKENS_PER_S = Column("transformers tok/s", field("hf_tokens_per_s"), ".1f")
RATIO = Column("ratio specdec/transformers", field("ratio"), ".2f", "x")
TARGET_FORWARDS = Column("target fwd specdec", field("target_forwards"))
HF_TARGET_FORWARDS = Column("target fwd transformers", field("hf_target_forwards"))

# ---------------------------------------------------------------------------- the tables both print
# Greedy vs speculative per category, then overall (render.py adds predicted tokens/round).
CATEGORY_TABLE = (CATEGORY, PROMPTS, TOKENS, DRAFTED_PER_ROUND, ACCEPT_RATE, TOKENS_PER_ROUND, VERIFY_ROUNDS,
                  GREEDY_TOKENS_PER_S, TOKENS_PER_S, SPEEDUP, PREDICTED_SPEEDUP, IDENTICAL)
PEER_TABLE = (MODE, DRAFT, K, TOKENS, PEER_TOKENS_PER_S, HF_TOKENS_PER_S, RATIO, TARGET_FORWARDS, HF_TARGET_FORWARDS,
              IDENTICAL)
