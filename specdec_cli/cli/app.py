"""The Typer `app` every command registers on (cli/commands/); no torch code here."""

from __future__ import annotations

import typer

from specdec_cli import __version__


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specdec {__version__}")
        raise typer.Exit()


app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Speculative (draft-verify) decoding: exact, faster greedy generation.")


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Speculative (draft-verify) decoding: exact, faster greedy generation."""
