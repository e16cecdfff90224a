"""`specdec export`: the command that serves a card on vLLM, SGLang or llama.cpp."""

from __future__ import annotations

import typer

from specdec_cli.cards.card import load_card
from specdec_cli.cli.app import app
from specdec_cli.cli.options import CARD_ARGUMENT, CARD_OPTION, one_card
from specdec_cli.cards.export import check_engine, export
from specdec_cli.cli.guard import err, friendly, json_out


@app.command("export")
@friendly
def export_command(
    card: str = CARD_ARGUMENT,
    card_option: str = CARD_OPTION,
    engine: str = typer.Option(..., "--engine", "-e", help="vllm, sglang or llama.cpp."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (command, argv, speculative "
                                 "settings, per-request settings, notes) instead of the command line."),
):
    """Print the command that serves a card's target and draft with speculative decoding on a
    serving engine. stdout holds the command line only (or, with --json, one JSON object);
    notes on what the engine does differently go to stderr. Draft kinds an engine cannot run
    (early-exit, toy, synthetic) are one Error line, exit 2.

    Examples:

        specdec export smollm2 --engine llama.cpp

        specdec export -c qwen2.5-coder-1.5b --engine llama.cpp

        specdec export qwen2.5-7b --engine vllm --json | jq -r .command

        eval "$(specdec export qwen2.5-7b --engine sglang)"
    """
    check_engine(engine)  # before reading the card: a typo in the engine is the first thing to hear about
    result = export(load_card(one_card(card, card_option)), engine)
    for note in result.notes:
        err.print(f"Note: {note}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        json_out.emit(result.as_dict())
    else:
        typer.echo(result.command)
