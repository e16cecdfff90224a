"""`specdec distill`: train a features draft for a card's target on this machine."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from specdec_cli.cards.card import load_card
from specdec_cli.cli.options import CARD
from specdec_cli.cli.app import app
from specdec_cli.cli.guard import err, friendly
from specdec_cli.cli.render import DistillReport
from specdec_cli.cli.requests import DistillRequest
from specdec_cli.cli.commands.common import load


@app.command()
@friendly
def distill(
    card: str = CARD,
    prompts_file: Optional[str] = typer.Option(
        None, "--prompts-file", help="Training prompts (.jsonl or .txt). Default: specdec's built-in training prompts "
        "(templated instructions; never the benchmark suite)."),
    minutes: float = typer.Option(30.0, "--minutes", help="Wall-clock budget: data generation (at most half) and training."),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Folder for model.safetensors and a ready card "
                                          "(default: ./<card>-features)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompt order, the initial weights and the batches."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Train exactly N steps (replays a recorded run)."),
    prompts: Optional[int] = typer.Option(None, "--prompts", help="Use exactly N training prompts (replays a recorded run)."),
    taps: Optional[str] = typer.Option(None, "--taps", help="The target's hidden states the draft reads, as layer counts "
                                       "(-1: the final one), fused as EAGLE-3 fuses low, middle and final layers, e.g. "
                                       "3,15,-1. Default: -1, the final one alone (EAGLE-1; on SmolLM2 the fused "
                                       "layers measured no better: docs/distill.md)."),
    self_prompts: int = typer.Option(0, "--self-prompts", help="Also train on N requests the target writes itself "
                                     "(sampled from its chat template's user turn, as Magpie does; seeded, cached), "
                                     "spread among the training prompts."),
):
    """Train a features draft (EAGLE-style) for a card's target on this machine, by
    self-distillation: the target's own greedy answers to training prompts, then one small
    block learns to predict its next hidden state. Prints held-out acceptance per draft position
    as it trains; every new best is written at once (Ctrl-C keeps it). stdout: the card's path.

    Examples:

        specdec distill -c smollm2 --minutes 30 --out smollm2-draft

        specdec generate -c smollm2-draft/smollm2-features.yaml "Tell me about volcanoes."
    """
    from specdec_cli.engine.taps import ONLY_FINAL
    from specdec_cli.training.distill import Settings, check_out, distill as run  # imports torch: only when the command runs

    request = DistillRequest(card=card, prompts_file=prompts_file, minutes=minutes, out_dir=out_dir, seed=seed,
                             steps=steps, prompts=prompts, taps=taps, self_prompts=self_prompts)
    out_path = request.out_path(load_card(card).name)
    check_out(out_path)  # an unwritable folder fails now, not after the data is made
    items, source = request.items()
    pair = load(card)
    settings = Settings(minutes=minutes, seed=seed, steps=steps, prompts=prompts, taps=request.tap_list() or ONLY_FINAL,
                        self_prompts=self_prompts)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeRemainingColumn(), console=err, disable=not err.is_terminal) as bar:
        result = run(pair, items, settings, out_path, request.command_line(), source, DistillReport(bar, err))
    a = " ".join(f"{x:.3f}" for x in result.alpha)
    err.print(f"held-out acceptance by draft position (weights of step {result.best_step} of {result.steps}): {a}\n"
              f"data: {result.prompts} prompts ({result.tokens:,} tokens) + {result.heldout} held out, "
              f"{result.data_s:.0f} s; training {result.train_s:.0f} s\nwrote {result.weights} and {result.card}",
              markup=False, highlight=False, soft_wrap=True)
    typer.echo(str(result.card))
    if result.interrupted:
        err.print("Interrupted: kept the best weights so far.", markup=False)
        raise typer.Exit(130)
