"""One screen after a GPU lease: our fair44 and cifar numbers beside the paper's, and the figures.

    python3 bench/gpu_summary.py --fair44 DIR --cifar DIR --out OUT

Ours come from the records through the analysis' own queries (``timing_methods.sql``,
``app_table9.sql``); the paper's from the labelled constants of the analysis
(``PAPER_T6``,
``PAPER_T9``),
in columns headed "paper" — its H100 protocol at the paper's shapes, not this run's. A part
that did not run (or left no records) says so instead of a table. Writes ``OUT/summary.md``
and the parts' figures under ``OUT/figures/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _has_records(folder: Path | None) -> bool:
    return folder is not None and folder.is_dir() and any(folder.rglob("*.parquet"))


def fair44_lines(folder: Path) -> list[str]:
    """Paper Table 6 beside ours: one row per method."""
    from stateaware.analysis.sections.timing import PAPER_T6
    from stateaware.analysis.sections.timing_rows import cohort_clocks, mean_ms, method_rows
    from stateaware.analysis.store.views import connect

    con = connect(folder)
    clock = cohort_clocks(con).get("fair44", "wall")
    rows = [r for r in method_rows(con) if r["cohort"] == "fair44"]
    lines = [
        f"| method | peak MiB | step ms ({clock}) | fits | paper peak GiB | paper step ms | paper fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        paper = PAPER_T6.get(r["method"])
        peak = "—" if r["max_peak_bytes"] is None else f"{r['max_peak_bytes'] / 2**20:.1f}"
        ms = mean_ms(r, clock)
        p = f"{paper[0]:.3f} | {paper[1]:.2f} | {paper[2]}" if paper else "— | — | —"
        lines.append(
            f"| {r['method']} | {peak} | {'—' if ms is None else f'{ms:.2f}'} | {r['fits']}/{r['processes']} | {p} |"
        )
    return lines


def cifar_lines(folder: Path) -> list[str]:
    """Paper Table 9 beside ours: one row per method."""
    from stateaware.analysis.sections.cifar_application import PAPER_T9, table9_rows
    from stateaware.analysis.store.views import connect

    lines = [
        "| method | allocated MiB | mean encoder s | paper allocated MiB | paper mean encoder s |",
        "|---|---|---|---|---|",
    ]
    for r in table9_rows(connect(folder)):
        paper = PAPER_T9.get(r["method"])
        mib = "—" if r["max_allocated_mib"] is None else f"{r['max_allocated_mib']:.2f}"
        p = f"{paper[0]:.2f} | {paper[2]:.2f}" if paper else "— | —"
        lines.append(f"| {r['method']} | {mib} | {r['mean_encoder_seconds']:.2f} | {p} |")
    return lines


def figures(folders: list[Path], out: Path) -> list[Path]:
    """The timing and application sections' figures for each part, under ``out``."""
    from stateaware.analysis import application, timing
    from stateaware.analysis.store.views import connect

    drawn: list[Path] = []
    for folder in folders:
        con = connect(folder)
        for module in (timing, application):
            drawn += module.figures(con, out)
    return drawn


def summary(fair44: Path | None, cifar: Path | None, header: str) -> str:
    """The summary's Markdown."""
    lines = [f"# {header}", ""]
    parts = [
        ("fair44 (paper Table 6: 44 GiB fair control, batch 65536)", fair44, fair44_lines),
        ("cifar (paper Table 9: 100 + 25 epochs, observed seeds 2702–2706)", cifar, cifar_lines),
    ]
    for title, folder, render in parts:
        lines += [f"## {title}", ""]
        if not _has_records(folder):
            lines += ["not run, or no records: see run.log", ""]
            continue
        assert folder is not None
        report = folder / "report.md"
        if report.is_file():  # the part's own header: device, shapes and protocol as run
            lines += [f"Ours: {report.read_text().splitlines()[0].lstrip('# ')}.", ""]
        lines += render(folder) + [""]
    lines += [
        "Ours are this run's short protocol (see the header and report.md); the paper columns are",
        "the paper's H100 figures (arXiv 2611.00590), quoted for comparison, never ours.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fair44", type=Path, default=None)
    parser.add_argument("--cifar", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--header", default="GPU lease summary")
    args = parser.parse_args(argv)
    text = summary(args.fair44, args.cifar, args.header)
    (args.out / "summary.md").write_text(text)
    print(text, end="")
    present = [f for f in (args.fair44, args.cifar) if _has_records(f)]
    if present:
        figure_dir = args.out / "figures"
        figure_dir.mkdir(exist_ok=True)
        for path in figures([f for f in present if f is not None], figure_dir):
            print(f"figure {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
