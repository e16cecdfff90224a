"""`specdec cards` and `specdec cards show`: the built-in model cards."""

from __future__ import annotations

import typer

from specdec_cli.cards.card import builtin_names, load_card
from specdec_cli.cli.options import CARD_ARGUMENT, CARD_OPTION, JSON, one_card
from specdec_cli.cli.app import app
from specdec_cli.cli.guard import friendly, json_out
from specdec_cli.cli.render import cards_table
from specdec_cli.cli.commands.common import out

cards_app = typer.Typer(invoke_without_command=True, add_completion=False, rich_markup_mode=None,
                        help="List the built-in model cards, or show one.")
app.add_typer(cards_app, name="cards")


@cards_app.callback()
@friendly
def cards(ctx: typer.Context, as_json: bool = JSON):
    """List the built-in cards (name, target, draft, description)."""
    if ctx.invoked_subcommand:
        return
    loaded = [load_card(name) for name in builtin_names()]
    if as_json:
        json_out.emit([{"name": c.name, "description": c.description, "target": c.target,
                        "draft": c.draft.label()} for c in loaded])
    else:
        out.print(cards_table(loaded))


@cards_app.command("show")
@friendly
def cards_show(name: str = CARD_ARGUMENT, card_option: str = CARD_OPTION):
    """Print one card's YAML.

    Examples:

        specdec cards show toy

        specdec cards show -c smollm2
    """
    card = load_card(one_card(name, card_option))
    out.print(f"# {card.path}", highlight=False, markup=False)
    out.print(card.path.read_text(encoding="utf-8").rstrip(), highlight=False, markup=False)
