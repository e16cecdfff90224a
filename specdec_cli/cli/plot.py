"""The sweep plot: tokens/round and speedup, measured points over the theory curves.

matplotlib is imported here only (lazily, from the CLI), and drawn with the Agg canvas: no
display, no pyplot global state.
"""

from __future__ import annotations

from pathlib import Path

from specdec_cli.files import write_atomic
from specdec_cli.loop.metrics import expected_speedup, expected_tokens_per_round

FORMATS = (".png", ".svg", ".pdf")


def sweep_plot(rows, path: str | Path, title: str) -> Path:
    """`rows`: bench rows over all prompts (scope 'all'). With synthetic rows the x axis is the
    agreement a, one colour per k; without, it is k, for the card's draft."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(12, 5), dpi=130, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    synthetic = [r for r in rows if r.agree is not None]
    card = [r for r in rows if r.agree is None]
    if synthetic:
        _by_agreement(left, right, synthetic, card)
    else:
        _by_k(left, right, card)
    right.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    right.annotate("greedy (1x)", (0.01, 1.0), xycoords=("axes fraction", "data"), va="bottom", fontsize=9, color="grey")
    left.set_ylabel("tokens per verify round")
    right.set_ylabel("wall speedup over greedy")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if synthetic:
        handles = [Line2D([], [], color="black", label="theory (Leviathan et al. 2023)"),
                   Line2D([], [], color="black", marker="o", linestyle="none", label="measured")]
        if card:
            handles.append(Line2D([], [], color="black", marker="*", markersize=12, linestyle="none",
                                  label=f"card draft {card[0].draft}, at its measured a"))
        right.legend(handles=handles + right.get_legend_handles_labels()[0], fontsize=9, loc="upper left")
    else:
        right.legend(fontsize=9, loc="upper left")
    fig.suptitle(title, fontsize=11)
    fmt = Path(path).suffix.lower().lstrip(".")
    return write_atomic(path, lambda p: fig.savefig(p, format=fmt), "--plot")


def _by_agreement(left, right, synthetic, card) -> None:
    import numpy as np

    ks = sorted({r.k for r in synthetic})
    grid = np.linspace(0.0, 1.0, 201)
    colors = {k: f"C{i}" for i, k in enumerate(ks)}
    for k in ks:
        pts = sorted((r for r in synthetic if r.k == k), key=lambda r: r.agree)
        v, c = pts[0].verify_cost, pts[0].draft_cost
        color = colors[k]
        left.plot(grid, [expected_tokens_per_round(a, k) for a in grid], color=color, label=f"k={k}")
        left.plot([r.agree for r in pts], [_num(r.tokens_per_round) for r in pts], "o", color=color)
        cost = f"c={c:.2f}" + (" simulated" if pts[0].draft_cost_simulated else "")
        right.plot(grid, [expected_speedup(a, k, c, verify=v) for a in grid], color=color,
                   label=f"k={k}: predicted with v={v:.2f}, {cost}")
        right.plot([r.agree for r in pts], [_num(r.speedup) for r in pts], "o", color=color)
    for r in card:
        if r.agreement_est is None:
            continue
        color = colors.get(r.k, "black")
        left.plot([r.agreement_est], [_num(r.tokens_per_round)], "*", color=color, markersize=14, markeredgecolor="black")
        right.plot([r.agreement_est], [_num(r.speedup)], "*", color=color, markersize=14, markeredgecolor="black")
    left.legend(fontsize=9, loc="upper left", title="theory lines (predictions), measured dots")
    for ax in (left, right):
        ax.set_xlabel("per-token agreement a (synthetic draft: set; card draft: measured)")
        ax.set_xlim(-0.02, 1.02)


def _by_k(left, right, card) -> None:
    pts = sorted(card, key=lambda r: r.k)
    ks = [r.k for r in pts]
    label = f"{pts[0].draft}" if pts else ""
    left.plot(ks, [_num(r.predicted_tokens_per_round) for r in pts], "-", color="C0", label="predicted (cost model)")
    left.plot(ks, [_num(r.tokens_per_round) for r in pts], "o", color="C0", label=f"measured: {label}")
    right.plot(ks, [_num(r.predicted_speedup) for r in pts], "-", color="C1", label="predicted with measured v and c")
    right.plot(ks, [_num(r.speedup) for r in pts], "o", color="C1", label=f"measured: {label}")
    left.legend(fontsize=9, loc="upper left")
    for ax in (left, right):
        ax.set_xlabel("k (draft tokens per round)")
        ax.set_xticks(ks)


def _num(value) -> float:
    return float("nan") if value is None else value  # a gap in the plot, not a crash
