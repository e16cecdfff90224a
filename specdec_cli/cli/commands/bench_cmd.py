"""`specdec bench`: plain greedy against speculative decoding on a prompt suite, timed in one run;
sweeps over the synthetic draft's agreement and over k."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperCommand

from specdec_cli.cards.card import load_card
from specdec_cli.cli.options import (COMPILE, TREE, MATMULS, SHAPES, BATCH, CARD, DEVICE, DTYPE, QUANTIZE, JSON, MAX_TOKENS,
    PROMPTS_FILE, TEMPERATURE, TOP_K, TOP_P)
from specdec_cli.cli.app import app
from specdec_cli.files import write_text_atomic
from specdec_cli.cli.guard import err, friendly, json_out
from specdec_cli.cli.plot import sweep_plot
from specdec_cli.cli.render import bench_csv, bench_json, bench_table, peer_table, show_table, sweep_table
from specdec_cli.cli.requests import AGREE_SWEEP, K_SWEEP, BenchRequest
from specdec_cli.cli.commands.common import load, out


class _BareLists(TyperCommand):
    """Lets `--agree-sweep` and `--k-sweep` be given bare: then they take their default list."""

    BARE = {"--agree-sweep": AGREE_SWEEP, "--k-sweep": K_SWEEP}

    def parse_args(self, ctx, args):
        fixed = []
        for i, arg in enumerate(args):
            fixed.append(arg)
            following = args[i + 1] if i + 1 < len(args) else None
            is_value = following is not None and (not following.startswith("-") or following[1:2] in tuple("0123456789."))
            if arg in self.BARE and not is_value:
                fixed.append(self.BARE[arg])
        return super().parse_args(ctx, fixed)


@app.command(cls=_BareLists)
@friendly
def bench(
    card: str = CARD,
    k: Optional[int] = typer.Option(None, "-k", "--k", help="Draft tokens per round (overrides the card)."),
    max_tokens: Optional[int] = MAX_TOKENS,
    repeats: int = typer.Option(3, "--repeats", "-r", help="Timed runs per prompt and mode after the warm-up; the median is reported."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N prompts of each category (quick runs)."),
    prompts_file: Optional[str] = PROMPTS_FILE,
    agree_sweep: Optional[str] = typer.Option(
        None, "--agree-sweep", metavar="[A,...]",
        help=f"Replace the card's draft by the synthetic draft at each agreement a (bare: {AGREE_SWEEP}); the card's draft is an extra row."),
    k_sweep: Optional[str] = typer.Option(None, "--k-sweep", metavar="[K,...]", help=f"Run every configuration at each k (bare: {K_SWEEP})."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed of the synthetic draft's agreement draws (--agree-sweep), or of sampling (--temperature > 0)."),
    draft_cost: Optional[float] = typer.Option(
        None, "--draft-cost", help="SIMULATED draft cost for the synthetic draft: sleep C target steps per drafted token (labelled 'sim')."),
    vs_transformers: bool = typer.Option(
        False, "--vs-transformers", help="Also run transformers' generate (greedy, and assisted with the card's draft at fixed k) on the same prompts."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write the sweep plot (.png, .svg or .pdf); needs --agree-sweep or --k-sweep."),
    csv_file: Optional[str] = typer.Option(None, "--csv", help="Write every row (per prompt, category, overall) as CSV."),
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
    batch_size: int = BATCH,
):
    """Time plain greedy against speculative decoding on a prompt suite, in one run.

    Warm-up first, then --repeats timed runs per prompt and mode (median reported). Every
    speculative output is checked against its greedy one: exit 1 on any difference.

    With --temperature > 0 (or a card that samples) the baseline is plain sampling with the same
    warping and seed, speculative sampling is timed against it, and speedup is per token (the
    two runs may stop at different lengths); outputs are equal in distribution, not compared.

    Examples:

        specdec bench --limit 1 -n 64

        specdec bench --agree-sweep --plot sweep.png

        specdec bench --agree-sweep 0.5,1.0 --k-sweep 2,4,8 --json > sweep.jsonl

        specdec bench --vs-transformers --csv bench.csv

        specdec bench --batch 8 --repeats 1
    """
    request = BenchRequest(k=k, agree_sweep=agree_sweep, k_sweep=k_sweep, repeats=repeats, limit=limit,
                           prompts_file=prompts_file, seed=seed, draft_cost=draft_cost, vs_transformers=vs_transformers,
                           plot=plot, csv=csv_file, batch=batch_size, temperature=temperature, top_k=top_k, top_p=top_p)
    items = request.items()
    json_out.start(as_json, command="bench", card=card)  # Ctrl-C: the rows so far + an incomplete marker
    from specdec_cli.eval import bench as measure, peers  # both load torch: only when the command runs
    from specdec_cli.eval.benchrows import BenchRow, PeerRow, summarize

    if vs_transformers:
        peers.check_peer(load_card(card))  # before minutes of loading
    sampled = request.check_card(load_card(card))  # checked before the long load
    pair = load(card, k=k, max_tokens=max_tokens, device=device, dtype=dtype, quantize=quantize, shapes=shapes, matmuls=matmuls, compile=compile, tree=tree, **request.sampling)

    c = pair.card
    peer = peers.transformers_peer(pair, c.k) if vs_transformers else None
    configs = measure.configs(pair, request.k_list or [c.k], request.agrees, seed or 0, draft_cost)
    context = {"card": c.name, "device": str(pair.device), "dtype": pair.dtype_name, "quantize": c.quantize, "chat": pair.chat,
               "max_tokens": c.max_tokens, "repeats": repeats, **measure.environment()}
    if batch_size > 1:
        context["batch"] = batch_size
    rows, interrupted, notes = [], False, []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("loading prompts", total=measure.steps(len(items), configs, repeats, peer))
        try:
            advance = lambda n, text: bar.update(task, advance=n, description=text)  # noqa: E731
            rows_of = (measure.run(pair, items, configs, c.max_tokens, repeats, peer, advance) if batch_size == 1 else
                       measure.run_batched(pair, items, configs, c.max_tokens, repeats, batch_size, advance, notes))
            for row in rows_of:
                rows.append(row)
                if as_json:
                    json_out.emit(bench_json(row, context))
        except KeyboardInterrupt:
            interrupted = True  # show what is done, then let `friendly` report the interrupt
    summary = summarize(rows)
    done = len({r.name for r in rows})
    title = (f"card {c.name} · {pair.device} {pair.dtype_name} · {done} prompts · max {c.max_tokens} tokens · "
             f"median of {repeats}" + (f" · batch {batch_size}" if batch_size > 1 else "") + (f" · SAMPLING T={c.temperature} top-k={c.top_k} top-p={c.top_p} seed={c.seed}: "
                                       "'greedy' columns are plain sampling" if sampled else "") + (f" · INTERRUPTED after {done} of {len(items)} prompts" if interrupted else ""))
    bench_rows = [r for r in summary if isinstance(r, BenchRow)]
    peer_rows = [r for r in summary if isinstance(r, PeerRow) and r.scope == "all"]
    if as_json and not interrupted:
        for row in summary:
            json_out.emit(bench_json(row, context))
    elif not as_json:
        out.print(title, highlight=False, markup=False)
        if not request.sweep:
            show_table(out, bench_table(bench_rows, f"Greedy vs speculative: {pair.draft.name}, k={c.k}"))
        else:
            show_table(out, sweep_table([r for r in bench_rows if r.scope == "all"], "Sweep: measured beside the theory"))
        if peer_rows:
            show_table(out, peer_table(peer_rows, "specdec vs transformers' generate, same prompts and process"))
    if interrupted:
        err.print(f"[yellow]Interrupted after {done} of {len(items)} prompts: the rows above are the finished ones[/]")
        if csv_file or plot:
            err.print("[yellow]--csv and --plot not written: the run was interrupted[/]")
        raise KeyboardInterrupt
    if csv_file:
        write_text_atomic(csv_file, bench_csv(rows + summary, context), "--csv")
        err.print(f"wrote {csv_file}", highlight=False)
    if plot:
        sweep_plot([r for r in bench_rows if r.scope == "all"], plot, f"{pair.card.target} · {title}")
        err.print(f"wrote {plot}", highlight=False)
    for note in notes:
        err.print(note, markup=False, highlight=False, soft_wrap=True)
    differ = [r for r in rows if isinstance(r, BenchRow) and r.identical is False]
    peers_differ = [r for r in rows if isinstance(r, PeerRow) and not r.identical]
    checked = sum(isinstance(r, BenchRow) and r.identical is not None for r in rows)
    if sampled:
        err.print("sampling: outputs are equal in distribution, not token for token (see verify-exactness --temperature)")
    else:
        err.print(("[green]" if not differ else "[red]") + f"{checked - len(differ)}/{checked} speculative outputs identical to greedy[/]")
    if peers_differ and pair.shapes == "pinned":  # transformers decodes in free shapes: another valid rounding
        err.print(f"note: transformers' output differs from specdec's pinned-shape greedy for {len(peers_differ)} prompt x "
                  f"mode runs (its 1-token steps round differently in {pair.dtype_name}; docs/shapes.md)", highlight=False)
        peers_differ = []
    if peers_differ:
        err.print(f"[red]Error: transformers' output differs from specdec's for {len(peers_differ)} prompt x mode runs[/]")
    if differ or peers_differ:
        raise typer.Exit(1)
