"""`specdec generate`: one prompt, or every prompt of a file (one after another or batched)."""

from __future__ import annotations

from typing import Optional

import typer

from specdec_cli.cli.options import (COMPILE, TREE, MATMULS, SHAPES, BATCH, CARD, DEVICE, DTYPE, QUANTIZE, JSON, MAX_TOKENS,
    PROMPTS_FILE, REMEASURE, SCHEDULE, SEED, TEMPERATURE, TOP_K, TOP_P)
from specdec_cli.cli.app import app
from specdec_cli.cli.guard import err, friendly, json_out
from specdec_cli.cards.prompts import read_stdin
from specdec_cli.cli.render import batch_summary_json, generation_json, show_generation
from specdec_cli.cli.requests import GenerateRequest
from specdec_cli.cli.commands.common import load, out


@app.command()
@friendly
def generate(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; '-' or piped stdin reads it from stdin."),
    card: str = CARD,
    mode: str = typer.Option("both", "--mode", "-m", help="spec, greedy or both (both checks they are identical). "
                             "With --temperature > 0 'greedy' is plain sampling, and both runs it beside speculative "
                             "sampling with the same seed: the tokens may differ (the distributions are equal), not an error."),
    k: Optional[int] = typer.Option(None, "-k", "--k", help="Draft tokens per round (overrides the card)."),
    max_tokens: Optional[int] = MAX_TOKENS,
    rounds: bool = typer.Option(False, "--rounds", help="Show the per-round accept table."),
    as_json: bool = JSON,
    prompts_file: Optional[str] = PROMPTS_FILE,
    device: Optional[str] = DEVICE,
    dtype: Optional[str] = DTYPE,
    quantize: Optional[str] = QUANTIZE,
    shapes: Optional[str] = SHAPES,
    matmuls: Optional[str] = MATMULS,
    compile: Optional[bool] = COMPILE,
    tree: Optional[bool] = TREE,
    temperature: Optional[float] = TEMPERATURE,
    top_k: Optional[int] = TOP_K,
    top_p: Optional[float] = TOP_P,
    seed: Optional[int] = SEED,
    schedule: Optional[str] = SCHEDULE,
    remeasure: bool = REMEASURE,
    batch_size: int = BATCH,
):
    """Generate from one prompt, speculatively and/or plain greedy, and compare.

    Examples:

        specdec generate "Explain what a hash table is."

        echo "Why is the sky blue?" | specdec generate --rounds

        specdec generate --card toy -k 6 --json "ba be bi"

        specdec generate --prompts-file prompts.jsonl > results.jsonl

        specdec generate --prompts-file prompts.jsonl --batch 8 > results.jsonl

        specdec generate --temperature 0.8 --top-p 0.95 --seed 7 "Write a haiku."
    """
    from specdec_cli.pair.generation import generate as run  # imports torch: only when the command runs
    from specdec_cli.pair.loading import check_prompts

    request = GenerateRequest(prompt=prompt, prompts_file=prompts_file, mode=mode, batch=batch_size)
    prompt, batch = request.read(read_stdin())
    if batch is not None:
        json_out.start(True, command="generate", card=card)  # a prompts file always gives JSON lines
    else:
        json_out.start(as_json, single=True, command="generate", card=card, prompt=prompt)
    pair = load(card, k=k, max_tokens=max_tokens, device=device, dtype=dtype, quantize=quantize, shapes=shapes, matmuls=matmuls, compile=compile, tree=tree, temperature=temperature,
                top_k=top_k, top_p=top_p, seed=seed, schedule=schedule, remeasure=remeasure)
    c = pair.card
    if batch is not None:
        check_prompts(pair, batch, c.max_tokens)  # a bad prompt fails the batch before any output
        if batch_size > 1:
            return generate_batched(pair, batch, mode, batch_size)
        differ = 0
        for p in batch:
            gen = run(pair, p.text, mode, c.k, c.max_tokens)
            json_out.emit({"id": p.id, **generation_json(gen, pair)})
            differ += gen.diverged
        if differ:
            err.print(f"Error: {differ} of {len(batch)} prompts gave speculative output different from greedy")
            raise typer.Exit(1)
        return
    gen = run(pair, prompt, mode, c.k, c.max_tokens)
    if as_json:
        json_out.emit(generation_json(gen, pair))
    else:
        show_generation(gen, pair, out, err, rounds)
    if gen.diverged:
        raise typer.Exit(1)


def generate_batched(pair, prompts, mode: str, batch_size: int) -> None:
    """--prompts-file with --batch N: one JSON line per prompt in input order, then a summary."""
    from specdec_cli.pair.generation import Summary, generate_many  # imports torch: only when the command runs

    c = pair.card
    summary = Summary(len(prompts), batch_size)
    for i, gen, divergence in generate_many(pair, [p.text for p in prompts], mode, c.k, c.max_tokens, batch_size, summary):
        json_out.emit({"id": prompts[i].id, **generation_json(gen, pair), **({"first_divergence": divergence} if divergence else {})})
    json_out.emit(batch_summary_json(summary))
    if summary.differ:
        err.print(f"Error: {summary.differ} of {len(prompts)} prompts gave speculative output different from greedy")
        raise typer.Exit(1)
