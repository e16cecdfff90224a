"""`specdec plan`: predict each draft x k x schedule's speedup on this machine, and recommend one."""

from __future__ import annotations

from typing import Optional

import typer

from specdec_cli.cards.card import load_card
from specdec_cli.cli.options import MATMULS, SHAPES, TREE, CARD, DEVICE, DTYPE, QUANTIZE, JSON, PROMPTS_FILE, REMEASURE
from specdec_cli.cli.app import app
from specdec_cli.errors import SpecdecError
from specdec_cli.cli.guard import err, friendly, json_out
from specdec_cli.cli.render import plan_table, show_table
from specdec_cli.cli.requests import PlanRequest
from specdec_cli.cli.commands.common import load, out


@app.command("plan")
@friendly
def plan_command(
    card: str = CARD,
    drafts: Optional[list[str]] = typer.Option(
        None, "--draft", "-d", help="Draft to plan for (repeatable): KIND[:key=value,...]. Default: the card's."),
    ks: Optional[str] = typer.Option(None, "-k", "--k", help="Comma-separated k values (default: 1,2,4,8 and the card's k)."),
    prompts_file: Optional[str] = PROMPTS_FILE,
    limit: int = typer.Option(1, "--limit", help="The first N prompts of each category of the built-in suite (or of --prompts-file)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", "-n", help="Tokens per continuation (default: the card's, at most 128)."),
    as_json: bool = JSON,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    quantize: Optional[str] = QUANTIZE,
    shapes: Optional[str] = SHAPES,
    matmuls: Optional[str] = MATMULS,
    remeasure: bool = REMEASURE,
    tree: Optional[bool] = TREE,
):
    """Predict each draft x k x schedule's speedup on this machine before timing anything,
    and recommend one (plain greedy when nothing pays).

    The target's greedy continuation of each prompt is computed once; every configuration is
    then replayed against it (the real loop, draft and schedule, no target forwards), and its
    rounds are priced with this machine's measured cost profile.

    Examples:

        specdec plan

        specdec plan -c smollm2 -d prompt-lookup:max_ngram=2 -k 2,4,6 --json

        specdec plan --prompts-file my-prompts.jsonl --limit 5

        specdec plan -c smollm2-distilled --tree -k 4,8    # chain and tree rows side by side
    """
    from specdec_cli.pair.loading import check_prompts  # imports torch: only when the command runs
    from specdec_cli.eval.plan import plan

    request = PlanRequest(ks=ks, drafts=drafts, prompts_file=prompts_file, limit=limit)
    items = request.items()
    json_out.start(as_json, command="plan", card=card)
    base = load_card(card)
    n = max_tokens if max_tokens is not None else min(base.max_tokens, 128)
    pair = load(card, drafts=request.specs, max_tokens=n, device=device, dtype=dtype, quantize=quantize, shapes=shapes, matmuls=matmuls, remeasure=remeasure, tree=tree)
    if not pair.sampling.greedy:
        raise SpecdecError(f"card {pair.card.name}: plan predicts greedy decoding; this card samples "
                           f"(temperature {pair.card.temperature})")
    k_list = request.k_list or sorted({1, 2, 4, 8, pair.card.k})
    specs = request.specs or [pair.card.draft]
    check_prompts(pair, items, n)  # a bad prompt fails before any work
    with err.status("planning") as status:
        rows, profile = plan(pair, items, specs, k_list, n, progress=status.update, trees=pair.card.tree)
    if as_json:
        for row in rows:
            json_out.emit({"card": pair.card.name, **row.as_dict()})
        return
    title = (f"card {pair.card.name} · {pair.device} {pair.dtype_name} · {len(items)} prompts · "
             f"{n} tokens each · predicted, not timed")
    show_table(out, plan_table(rows, profile, title))
    best = next(r for r in rows if r.recommended)
    advice = ("plain greedy: no configuration is predicted to pay on this machine" if best.k == 0 else
              f"{best.label} with k={best.k}, schedule {best.schedule}: predicted {best.predicted_speedup:.2f}x")
    err.print(f"Recommended: {advice}", highlight=False, markup=False)
