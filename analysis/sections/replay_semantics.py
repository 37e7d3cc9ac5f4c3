"""The semantic cohort's report: paper §5 and Table 2 from the ``records`` view.

Every count in the "ours" columns comes from ``analysis/sections/sql/table2.sql`` over the
``records`` view (the latest run of each cohort). The "paper" columns quote the paper's
published Table 2 for comparison and are labelled as such; nothing from them enters our
columns. Rows follow the paper's order; a (backend, method) the records lack shows as
missing, and one the paper lacks is appended. Needs only DuckDB: never imports torch or
jax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stateaware.analysis.sections.paper import PAPER_TABLE2

__all__ = ["TITLE", "PAPER_TABLE2", "ROWS", "SQL_FILE", "rows", "render"]

#: The report section's heading (a kind names this module in REPORT: stateaware.kinds.Kind).
TITLE = "Replay semantics in PyTorch and JAX (§5, Table 2)"

SQL_FILE = Path(__file__).with_name("sql") / "table2.sql"

#: Paper row order and labels: (backend, method) -> the paper's row label.
ROWS: dict[tuple[str, str], str] = {
    ("torch", "functional"): "Torch functional reference",
    ("torch", "eager"): "Torch native eager",
    ("torch", "reentrant"): "Torch reentrant",
    ("torch", "nonreentrant"): "Torch nonreentrant",
    ("torch", "reentrant_norng"): "Torch reentrant, RNG unpreserved",
    ("torch", "nonreentrant_norng"): "Torch nonreentrant, RNG unpreserved",
    ("torch", "transactional"): "Torch transactional nonreentrant",
    ("jax", "functional"): "JAX functional reference",
    ("jax", "checkpoint"): "JAX functional checkpoint",
    ("jax", "inplace_eager"): "JAX native in-place eager",
    ("jax", "inplace_checkpoint"): "JAX native in-place checkpoint",
    ("jax", "holder_eager"): "JAX impure-holder eager",
    ("jax", "holder_checkpoint"): "JAX impure-holder checkpoint",
}


def rows(con: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """``(backend, method) -> {m, r, d, other, n, seed_keys, max_match_error}`` from the SQL."""
    cursor = con.execute(SQL_FILE.read_text())
    names = [d[0] for d in cursor.description]
    return {(row[0], row[1]): dict(zip(names[2:], row[2:], strict=True)) for row in cursor.fetchall()}


def render(con: Any) -> str:
    """Table 2 as Markdown: our M/R/D per row beside the paper's, then a closing note."""
    ours = rows(con)
    keys = list(ROWS) + sorted(k for k in ours if k not in ROWS)
    lines = [
        "| Backend / execution | M | R | D | n | seed keys | paper M | paper R | paper D |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    differ: list[str] = []
    for key in keys:
        label = ROWS.get(key, f"{key[0]} {key[1]}")
        paper = PAPER_TABLE2.get(key)
        paper_cells = [str(v) for v in paper] if paper else ["—"] * 3
        row = ours.get(key)
        if row is None:
            lines.append(f"| {label} | missing | | | 0 | 0 | {' | '.join(paper_cells)} |")
            differ.append(label)
            continue
        mrd = (row["m"], row["r"], row["d"])
        lines.append(
            f"| {label} | {mrd[0]} | {mrd[1]} | {mrd[2]} | {row['n']} | {row['seed_keys']} | "
            f"{' | '.join(paper_cells)} |"
        )
        if paper is None or mrd != paper or row["other"]:
            differ.append(label)
    total = sum(r["n"] for r in ours.values())
    by_backend = {b: sum(r["n"] for (bk, _), r in ours.items() if bk == b) for b in ("torch", "jax")}
    lines += [
        "",
        f"Records: {total} ({by_backend['torch']} Torch, {by_backend['jax']} JAX). "
        "M: matches the functional reference (the references: the float64 oracle) in outputs, "
        "final state and both backward passes; R: the framework raised; D: an observed mismatch. "
        "The paper columns quote the paper's Table 2.",
    ]
    if differ:
        lines.append(f"Rows whose counts differ from the paper's: {', '.join(differ)}.")
    else:
        lines.append("Every row's M/R/D equals the paper's.")
    return "\n".join(lines)
