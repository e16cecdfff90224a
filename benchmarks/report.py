"""Write one machine kind's page, benchmarks/results/<kind>.md, from the JSON lines in its folder
benchmarks/results/<kind>/ (written there by benchmarks/run.sh; benchmarks/summary.py then makes
the summary across kinds, benchmarks/RESULTS.md).

Only reads the JSON contracts (bench: one object per line, `scope` prompt | category | all), so
every number on a page comes from a run, and regenerating it is one command:

    python benchmarks/report.py DIR [COMMAND [NOTE]] > DIR.md
    python benchmarks/report.py --machine [COMMAND]   # this machine and run, as JSON (machine.json)
    python benchmarks/report.py --slug                # this machine's kind: the folder's name

DIR holds machine.json (the CPU model, vendor, cores, torch's BLAS, versions, date, commit and
the command, recorded by run.sh when it starts; COMMAND defaults to its `command`), bench.jsonl
and sweep.jsonl, and optionally plan.jsonl, distilled.jsonl, pair.jsonl, pair-suite.jsonl,
pair-exact.jsonl, batch.jsonl, batch-exact.jsonl, soak.jsonl, readme.jsonl, llamacpp.jsonl
(benchmarks/peers/llamacpp.sh), vllm.jsonl (benchmarks/peers/vllm.sh) and exactness.jsonl
(benchmarks/exactness.sh). Every section
names the machine at its top. NOTE, when given, follows the opening sentence (say there how the
files were made if not all by one run of COMMAND).

The page is the SECTIONS below in order, each from its own module (report_*.py), then the
closing note's lines (CLOSINGS). Each table is a list of columns; those that `specdec bench` also
prints are defined once, in specdec_cli/eval/columns.py.
"""

from __future__ import annotations

import json
import sys

import report_batch as batch
import report_cards as cards
import report_llamacpp as llamacpp
import report_shapes as shapes
import report_suite as suite
import report_vllm as vllm
from report_common import Folder, bench_rows, f, load, optional, overall_row, table  # noqa: F401 (summary.py's)
from report_machine import (UNKNOWN, blas_label, commit_label, cpu_model, load_machine,  # noqa: F401
                            machine_line, machine_record, name_the_machine, slug)
from report_batch import batch_overall  # noqa: F401 (summary.py's)
from report_llamacpp import llamacpp_runs  # noqa: F401 (summary.py's)
from report_shapes import exactness_groups  # noqa: F401 (summary.py's)
from report_vllm import vllm_readme  # noqa: F401 (summary.py's)

# The page, in order: each reads the folder and gives its lines, none where its file is absent (vLLM's
# says in one line that it is missing beside the README example).
SECTIONS = (suite.opening, suite.category_section, suite.peer_section, suite.plan_section, suite.sweep_section,
            cards.distilled_section, cards.pair_section, cards.pair_suite_section, cards.pair_exact_section,
            batch.batch_section, batch.batch_exact_section, suite.readme_section, llamacpp.llamacpp_section,
            vllm.vllm_section, shapes.exactness_section, shapes.bf16_section, shapes.compile_section)
# The closing note: one line per figure a run measured, in this order.
CLOSINGS = (suite.suite_closing, cards.distilled_closing, cards.pair_closing, batch.batch_closing,
            suite.readme_closing, cards.pair_suite_closing, cards.pair_exact_closing, batch.batch_exact_closing,
            llamacpp.llamacpp_closing, vllm.vllm_closing, shapes.exactness_closing)


def main(directory: str, command: str | None = None, note: str = "") -> str:
    folder = Folder(directory, command, note)
    out = [line for section in SECTIONS for line in section(folder)]
    ends = [line for closing in CLOSINGS for line in closing(folder)]
    if ends:
        out += ["", "## Closing note", ""] + ends
    out += [""]
    return "\n".join(name_the_machine(out, machine_line(folder.machine, folder.name)))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--machine"] and len(args) <= 2:  # this machine and run, for machine.json
        sys.stdout.write(json.dumps(machine_record(*args[1:]), indent=2) + "\n")
    elif args == ["--slug"]:
        print(slug(cpu_model()))
    elif 1 <= len(args) <= 3 and not args[0].startswith("-"):  # directory[, command[, a note on how this run differs]]
        sys.stdout.write(main(*args))
    else:
        sys.exit(__doc__)
