"""The `specdec` command line: the Typer app (app.py), the options commands share (options.py),
one module per command (commands/: parse the options into a request, call one library function,
render), and how a command checks its options (requests.py), ends (guard.py) and shows its
results (render.py, plot.py). No torch code here.
"""

from specdec_cli.cli.app import app
from specdec_cli.cli.commands import (  # noqa: F401  importing a command registers it; this order is --help's
    generate_cmd, verify_exactness_cmd, bench_cmd, plan_cmd, fetch_cmd, export_cmd, distill_cmd, cards_cmd)


def main() -> None:
    app()
