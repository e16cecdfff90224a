"""`specdec verify-exactness`: speculative == greedy over prompts x k x drafts (or, when sampling,
equal in distribution), with every divergence explained."""

from __future__ import annotations

from typing import Optional

import typer

from specdec_cli.cli.options import (BATCH, COMPILE, TREE, MATMULS, SHAPES, CARD, DEVICE, DTYPE, QUANTIZE, JSON, MAX_TOKENS,
    PROMPTS_FILE, SEED, TEMPERATURE, TOP_K, TOP_P)
from specdec_cli.cli.app import app
from specdec_cli.errors import SpecdecError
from specdec_cli.cli.guard import err, friendly, json_out
from specdec_cli.cards.prompts import SUITE
from specdec_cli.cli.render import sampling_table, verify_table
from specdec_cli.cli.requests import VerifyRequest
from specdec_cli.cli.commands.common import load, out


@app.command("verify-exactness")
@friendly
def verify_exactness(
    prompts: Optional[list[str]] = typer.Argument(None, help="Prompts (default: the built-in suite)."),
    card: str = CARD,
    ks: Optional[str] = typer.Option(None, "-k", "--k", help="Comma-separated k values (default 1,2,4,8; when sampling, the card's k)."),
    drafts: Optional[list[str]] = typer.Option(
        None, "--draft", "-d", help="Draft to check (repeatable): KIND[:key=value,...], e.g. early-exit:layers=10. Default: the card's."),
    max_tokens: Optional[int] = MAX_TOKENS,
    prompts_file: Optional[str] = PROMPTS_FILE,
    as_json: bool = JSON,
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
    samples: int = typer.Option(200, "--samples", "-N", help="Sampling: speculative draws per prompt x draft x k (and as many plain ones)."),
    positions: int = typer.Option(2, "--positions", help="Sampling: test the joint distribution of the first 1..P generated tokens."),
    alpha: float = typer.Option(0.01, "--alpha", help="Sampling: family-wise level; each test must keep p >= alpha / tests (Bonferroni)."),
    bitwise: bool = typer.Option(False, "--bitwise", help="Also compare the target's logits at every emitted position "
                                 "(JSON: bitwise, and where they first differ); with pinned shapes any difference exits 1."),
    batch_size: int = BATCH,
):
    """Prove speculative == greedy over prompts x k x drafts; explain any divergence.

    Exit 0 when every output is identical, 1 on any divergence, 2 on usage errors.

    With --temperature > 0 (or a card that samples) it becomes a statistical test: per prompt x
    draft x k, N speculative draws of the first P tokens against the target's exact distribution
    (toy) or N plain-sampling draws (real models), chi-square per 1..P tokens; exit 1 when any
    test rejects at alpha (Bonferroni over all tests). Default prompts: a short subset of the suite.

    Examples:

        specdec verify-exactness -k 1,2,4,8

        specdec verify-exactness --card toy -d toy:agree=0.3 -d toy:agree=0.9 "ba be"

        specdec verify-exactness --prompts-file prompts.jsonl --json

        specdec verify-exactness --temperature 0.8 --samples 300 --positions 2

        specdec verify-exactness --dtype bfloat16 --shapes pinned --bitwise -k 1,4 --batch 8
    """
    from specdec_cli.pair.loading import build_draft, check_prompts  # imports torch: only when the command runs
    from specdec_cli.eval.verify import SAMPLING_PROMPTS, verify

    request = VerifyRequest(prompts=prompts, prompts_file=prompts_file, ks=ks, drafts=drafts,
                            samples=samples, positions=positions, alpha=alpha, bitwise=bitwise, batch=batch_size)
    items, k_list = request.items(), request.k_list
    json_out.start(as_json, command="verify-exactness", card=card)
    pair = load(card, drafts=request.specs, max_tokens=max_tokens, device=device, dtype=dtype, quantize=quantize, shapes=shapes, matmuls=matmuls, compile=compile, tree=tree,
                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    draft_list = [build_draft(s, pair) for s in request.specs] or [pair.draft]
    if not pair.sampling.greedy:
        for option, given in (("--bitwise", bitwise), ("--batch", batch_size > 1)):
            if given:
                raise SpecdecError(f"command line: {option}: compares greedy runs token by token; card "
                                   f"{pair.card.name} samples (temperature {pair.card.temperature})")
        items = items or [p for p in SUITE if p.id in SAMPLING_PROMPTS]
        return verify_sampled(pair, items, k_list or [pair.card.k], draft_list, samples, positions, alpha, as_json)
    items, k_list = items or SUITE, k_list or [1, 2, 4, 8]
    check_prompts(pair, items, pair.card.max_tokens, draft_list)  # a bad prompt fails before any output
    checks, total = [], len(items) * len(k_list) * len(draft_list)
    with err.status("") as status:
        for check_ in verify(pair, items, k_list, draft_list, pair.card.max_tokens, bitwise, batch_size):
            checks.append(check_)
            status.update(f"verified {len(checks)}/{total}: {check_.id} k={check_.k} {check_.draft}")
            if as_json:
                json_out.emit(check_.as_dict())
    failed = [c for c in checks if not c.passed]
    if not as_json:
        out.print(verify_table(checks, f"card {pair.card.name}: speculative vs greedy, {len(items)} prompts, "
                                       f"{pair.shapes} shapes"))
    summary = f"{sum(c.identical for c in checks)}/{len(checks)} identical ({pair.shapes} shapes)"
    if bitwise:
        summary += f", {sum(c.bitwise is True for c in checks)}/{len(checks)} bitwise-equal logits"
    err.print(("[green]" if not failed else "[red]") + summary + "[/]")
    if failed:
        raise typer.Exit(1)


def verify_sampled(pair, items, k_list, draft_list, samples: int, positions: int, alpha: float, as_json: bool) -> None:
    """verify-exactness at temperature > 0: one chi-square test per prompt x draft x k x 1..positions."""
    from specdec_cli.eval.verify import verify_sampling  # imports torch: only when the command runs

    c = pair.card
    settings = {"temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p, "seed": c.seed}
    checks, tests = [], len(items) * len(k_list) * len(draft_list) * positions
    with err.status("") as status:
        for check_ in verify_sampling(pair, items, k_list, draft_list, samples, positions, alpha, pair.generator(),
                                      status.update):
            checks.append(check_)
            if as_json:
                json_out.emit({**check_.as_dict(), **settings})
    failed = [ch for ch in checks if not ch.passed]
    if not as_json:
        versus = "the exact distribution" if checks[0].reference == "exact" else f"plain sampling (N={samples})"
        out.print(sampling_table(checks, f"card {c.name}: speculative sampling vs {versus} · T={c.temperature} "
                                         f"top-k={c.top_k} top-p={c.top_p} seed={c.seed} · {len(items)} prompts"))
    err.print(("[green]" if not failed else "[red]") + f"{len(checks) - len(failed)}/{len(checks)} tests pass "
              f"(N={samples} each; pass: p >= {alpha}/{tests} = {alpha / tests:.2g})[/]", highlight=False)
    if failed:
        raise typer.Exit(1)
