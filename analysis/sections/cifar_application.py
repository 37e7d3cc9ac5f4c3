"""The CIFAR-100 dense-queue application report: Table 9 and Figure 3C data (paper §12).

Reads the latest ``cifar`` run through ``analysis/sections/sql/app_*.sql``:

* Table 9 — per method: allocated and reserved peak MiB (least–largest over seeds),
  mean complete-encoder seconds with the per-seed min–max, beside the paper's H100
  columns (labelled as the paper's; never mixed into ours);
* quality — per seed: how many distinct test-score files the seven methods wrote (one
  means byte-identical), accuracy and mean cross-entropy read back from the score file;
* the §12 comparisons — joint vs whole and joint vs deferred eager, geometric means of
  the per-seed ratios with their min–max (descriptive, no interval claimed);
* Figure 3C data — one row per complete encoder process; ``figure3c`` plots it.

Imports neither torch nor jax.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from stateaware.analysis.figures import colour
from stateaware.analysis.sections.paper import PAPER_T9, PAPER_T9_TIME_RATIOS
from stateaware.analysis.sections.queries import rows_of

from stateaware.app.protocol import METHODS as _METHODS  # torch-free, unlike stateaware.app.moco
from stateaware.records.writer import write_bytes_atomic

__all__ = [
    "TITLE",
    "PAPER_T9",
    "process_rows",
    "table9_rows",
    "comparison_rows",
    "render",
    "figures",
    "figure3c",
]

#: The report section's heading (a kind names this module in REPORT: stateaware.kinds.Kind).
TITLE = "CIFAR-100 dense-queue application (§12, Table 9, Figure 3C)"


def process_rows(con: Any) -> list[dict[str, Any]]:
    """``app_processes.sql``: one dict per (seed, method) process (Figure 3C's points)."""
    return rows_of(con, "app_processes")


def table9_rows(con: Any) -> list[dict[str, Any]]:
    """``app_table9.sql``: one dict per method."""
    return rows_of(con, "app_table9", methods=list(_METHODS))


def comparison_rows(con: Any) -> list[dict[str, Any]]:
    """``app_comparisons.sql``: joint/whole and joint/deferred."""
    return rows_of(con, "app_comparisons")


def _range(lo: float | None, hi: float | None, fmt: str) -> str:
    if lo is None or hi is None:
        return "—"
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}–{format(hi, fmt)}"


def summary(out: str, cohort: str) -> str:
    """What ``python -m stateaware cohort=NAME`` prints after a cifar run: ``render`` over the
    latest cifar run under ``out`` (every cohort of the kind reads the same tables)."""
    from stateaware.analysis.store.views import connect  # lazy: only the command's summary reads the views

    return render(connect(Path(out)))


def render(con: Any) -> str:
    """Markdown: Table 9 (ours beside the paper's), quality per seed, comparisons, Figure 3C data."""
    procs = process_rows(con)
    lines = ["## Dense-queue application (paper §12; Table 9, Figure 3C)", ""]
    if not procs:
        return "\n".join(lines + ["no cifar rows", ""]) + "\n"
    hardware = sorted({p["hardware"] for p in procs})
    verified = sorted({bool(p["checksum_verified"]) for p in procs})
    quality_only = sorted({p["seed"] for p in procs if not p["observed"]})
    cards = sorted({str(p["card_source"]) for p in procs if p["card_source"]})
    sources = sorted({str(p["peak_source"]) for p in procs if p["observed"]})
    lines += [
        f"hardware {', '.join(hardware)}; peaks from {', '.join(sources) or '—'}; archive checksum verified: "
        f"{', '.join(map(str, verified))}; card {', '.join(cards) or '—'}; {len(procs)} processes"
        + (
            f"; quality-only (unobserved) seeds {', '.join(map(str, quality_only))}, left out of Table 9 and Figure 3C"
            if quality_only
            else ""
        )
        + ". The paper's columns are its H100 protocol (observed seeds 2702–2706); ours are this run's.",
        "",
    ]
    lines += [
        "| method | seeds | allocated MiB | reserved MiB | mean encoder s (wall) | min–max s (wall) | "
        "paper allocated MiB | paper reserved MiB | paper mean s | paper min–max s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table9_rows(con):
        paper = PAPER_T9.get(r["method"])
        p = f"{paper[0]:.2f} | {paper[1]:.2f} | {paper[2]:.2f} | {paper[3]}" if paper else "— | — | — | —"
        lines.append(
            f"| {r['method']} | {r['seeds']} | {_range(r['min_allocated_mib'], r['max_allocated_mib'], '.2f')} | "
            f"{_range(r['min_reserved_mib'], r['max_reserved_mib'], '.2f')} | "
            f"{r['mean_encoder_seconds']:.2f} | "
            f"{_range(r['min_encoder_seconds'], r['max_encoder_seconds'], '.2f')} | {p} |"
        )
    lines += [
        "",
        "| seed | observed | methods | distinct score files | accuracy | mean cross-entropy |",
        "|---|---|---|---|---|---|",
    ]
    seeds = sorted({p["seed"] for p in procs})
    for seed in seeds:
        mine = [p for p in procs if p["seed"] == seed]
        hashes = {p["scores_sha256"] for p in mine}
        accs = sorted({p["test_accuracy"] for p in mine})
        losses = sorted({p["test_mean_loss"] for p in mine})
        observed = "yes" if all(p["observed"] for p in mine) else "no (quality only)"
        lines.append(
            f"| {seed} | {observed} | {len(mine)} | {len(hashes)} | {', '.join(f'{a:.4f}' for a in accs)} | "
            f"{', '.join(f'{x:.10f}' for x in losses)} |"
        )
    comps = comparison_rows(con)
    if comps:
        lines += [
            "",
            "| comparison | seeds | allocated ratio (geo. mean) | range | encoder time ratio (wall, geo. mean) | "
            "range | paper allocated ratio | paper time ratio | paper range |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in comps:
            denominator = c["comparison"].split("/")[1]
            paper_alloc = PAPER_T9["joint"][0] / PAPER_T9[denominator][0]
            paper_time = PAPER_T9_TIME_RATIOS.get(c["comparison"])
            paper = f"{paper_alloc:.4f} | {paper_time[0]:.6f} | {paper_time[1]}" if paper_time else "— | — | —"
            lines.append(
                f"| {c['comparison']} | {c['seeds']} | {c['allocated_geomean']:.6f} | "
                f"[{c['allocated_min']:.6f}, {c['allocated_max']:.6f}] | {c['seconds_geomean']:.6f} | "
                f"[{c['seconds_min']:.6f}, {c['seconds_max']:.6f}] | {paper} |"
            )
        lines += ["", "Ranges are over seeds; no interval or significance is claimed."]
    lines += [
        "",
        "Figure 3C data (one point per observed complete encoder process):",
        "",
        "| seed | method | allocated MiB | encoder s (wall) |",
        "|---|---|---|---|",
    ]
    for p in (p for p in procs if p["observed"]):
        mib = "—" if p["peak_allocated_bytes"] is None else f"{p['peak_allocated_bytes'] / 1048576:.2f}"
        lines.append(f"| {p['seed']} | {p['method']} | {mib} | {p['encoder_seconds']:.3f} |")
    return "\n".join(lines) + "\n"


def figure3c(con: Any, path: Path | str) -> Path:
    """Plot Figure 3C (allocated MiB against complete-encoder seconds, one dot per
    process, black ticks at each method's mean) to ``path``; returns the path."""
    # lazy: matplotlib (~1.5 s to import) only when the figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as matplotlib above

    procs = [p for p in process_rows(con) if p["observed"] and p["peak_allocated_bytes"] is not None]
    if not procs:
        raise ValueError("no cifar processes with an allocated peak to plot")
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in _METHODS:
        pts = [p for p in procs if p["method"] == method]
        if not pts:
            continue
        xs = [p["encoder_seconds"] for p in pts]
        ys = [p["peak_allocated_bytes"] / 1048576 for p in pts]
        mean = (sum(xs) / len(xs), sum(ys) / len(ys))
        ax.scatter(xs, ys, s=18, label=method, color=colour(method))  # the method's colour in every figure
        ax.scatter([mean[0]], [mean[1]], marker="|", s=200, color="black")
        ax.annotate(method, mean, xytext=(6, 4), textcoords="offset points", fontsize=7, color=colour(method))
    seeds = len({p["seed"] for p in procs})
    ax.set_title(
        f"Figure 3C (cifar): peak allocated vs complete-encoder time, {len(procs)} processes, "
        f"{seeds} seed{'s' if seeds != 1 else ''}",
        fontsize=9,
    )
    ax.set_xlabel("complete encoder seconds (wall)")
    ax.set_ylabel("peak allocated MiB")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    image = io.BytesIO()  # written like every report file: atomically, and checked for links below out
    fig.savefig(image, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return write_bytes_atomic(image.getvalue(), path)


def figures(con: Any, out: Path) -> list[Path]:
    """The report's figures for this section: Figure 3C when cifar processes have peaks."""
    has_peaks = any(p["observed"] and p["peak_allocated_bytes"] is not None for p in process_rows(con))
    return [figure3c(con, Path(out) / "figure3c-cifar.png")] if has_peaks else []


if __name__ == "__main__":  # the tool lives with the other command lines
    from stateaware.commands.sections import application

    sys.exit(application())
