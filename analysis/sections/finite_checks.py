"""The finite-program report: paper §6, §7 and Table 3 quantities from the ``records`` view.

Every number in the "ours" column comes from SQL in ``analysis/sections/sql/finite_*.sql`` run over
the ``records`` view (the latest run of each cohort, by the ``runs`` view); the "paper"
column quotes the paper's published figures for comparison and is labelled as such. Record
convention (see ``cohorts/_finite_common.py``): one row per program x method or check,
``backend='finite'``; ``outcome='match'`` when a check holds; for the controls
(``final_storage_control``, ``wrong_rng_control``) a ``diverge`` is a detection;
``unsupported`` is an integer-write program refused by admission. This module needs only
DuckDB: it never imports the finite library, NumPy, torch or jax.
"""

from __future__ import annotations

from typing import Any

from stateaware.analysis.sections.paper import PAPER_FINITE as PAPER
from stateaware.analysis.sections.queries import SQL_DIR

__all__ = ["TITLE", "PAPER", "SQL_FILES", "quantities", "render"]

#: The report section's heading (a kind names this module in REPORT: stateaware.kinds.Kind).
TITLE = "Independent derivative, byte, engine and joint-alias checks (§6, §7, Table 3)"

SQL_FILES = ("finite_derivative", "finite_bytes", "finite_engines", "finite_joint_alias")


def _sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


def _one(con: Any, name: str) -> dict[str, Any]:
    relation = con.execute(_sql(name))
    names = [d[0] for d in relation.description]
    row = relation.fetchone()
    return dict(zip(names, row, strict=True)) if row else dict.fromkeys(names)


def _all(con: Any, name: str) -> tuple[list[str], list[tuple]]:
    relation = con.execute(_sql(name))
    return [d[0] for d in relation.description], relation.fetchall()


def quantities(con: Any) -> dict[str, dict[str, Any]]:
    """The result row of each ``finite_*`` summary query, by file name."""
    return {name: _one(con, name) for name in SQL_FILES}


def _n(value: int | None) -> str:
    return "—" if value is None else f"{int(value):,}"


def _frac(hits: int | None, total: int | None) -> str:
    return "—" if not total else f"{int(hits or 0):,}/{int(total):,}"


def _e(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _cell(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _compare_count(ours: str, paper: str) -> str:
    return "same" if ours.replace(",", "") == paper.replace(",", "") else "differs"


def _compare_all(hits: int | None, total: int | None, paper_says_all: bool = True) -> str:
    if not total:
        return "no rows"
    missed = int(total) - int(hits or 0)
    if not paper_says_all:
        return "all hold" if missed == 0 else f"{missed} do not hold"
    return "same (all)" if missed == 0 else f"differs ({missed} not)"


def _compare_error(value: float | None, paper: float) -> str:
    if value is None:
        return "no rows"
    return "ours lower" if value < paper else ("same" if value == paper else "ours higher")


def render(con: Any) -> str:
    """A Markdown report: our §6/§7/Table 3 quantities beside the paper's published figures."""
    q = quantities(con)
    d, b, e, j = (q[n] for n in SQL_FILES)
    rows = [
        (
            "§6 derivative programs",
            _n(d["programs"]),
            PAPER["derivative_programs"],
            _compare_count(_n(d["programs"]), PAPER["derivative_programs"]),
        ),
        (
            "§6 version graph: exact output and gradient within tolerance",
            _frac(d["graph_matches"], d["graph_rows"]),
            PAPER["graph"],
            _compare_all(d["graph_matches"], d["graph_rows"]),
        ),
        (
            "§6 max gradient disagreement (version graph vs forward Jacobian)",
            _e(d["max_gradient_disagreement"]),
            PAPER["max_gradient_disagreement"],
            _compare_error(d["max_gradient_disagreement"], 8.88e-16),
        ),
        (
            "§6 final-storage control detected",
            _frac(d["control_detected"], d["control_rows"]),
            PAPER["control_detected"],
            _compare_all(d["control_detected"], d["control_rows"]),
        ),
        (
            "§6 byte programs",
            _n(b["programs"]),
            PAPER["byte_programs"],
            _compare_count(_n(b["programs"]), PAPER["byte_programs"]),
        ),
        (
            "§6 snapshot replay matches bytes and RNG state",
            _frac(b["snapshot_matches"], b["snapshot_rows"]),
            PAPER["snapshot"],
            _compare_all(b["snapshot_matches"], b["snapshot_rows"]),
        ),
        (
            "§6 region undo matches bytes and RNG state",
            _frac(b["region_undo_matches"], b["region_undo_rows"]),
            PAPER["region_undo"],
            _compare_all(b["region_undo_matches"], b["region_undo_rows"]),
        ),
        (
            "§6 wrong RNG state detected",
            _frac(b["wrong_rng_detected"], b["wrong_rng_rows"]),
            PAPER["wrong_rng"],
            _compare_all(b["wrong_rng_detected"], b["wrong_rng_rows"]),
        ),
        (
            "§7 engine programs",
            _n(e["programs"]),
            PAPER["engine_programs"],
            _compare_count(_n(e["programs"]), PAPER["engine_programs"]),
        ),
        (
            "§7 engine recoveries (program x engine) matching",
            _frac(e["engine_matches"], e["engine_rows"]),
            PAPER["engine_recoveries"],
            _compare_all(e["engine_matches"], e["engine_rows"], paper_says_all=False),
        ),
        (
            "§7 max engine gradient error",
            _e(e["max_engine_gradient_error"]),
            PAPER["max_engine_gradient_error"],
            _compare_error(e["max_engine_gradient_error"], 1.56e-15),
        ),
        (
            "Table 3 complex-step programs",
            _n(e["complex_step_programs"]),
            PAPER["complex_step_programs"],
            _compare_count(_n(e["complex_step_programs"]), PAPER["complex_step_programs"]),
        ),
        (
            "Table 3 complex-step coordinates",
            _n(e["complex_step_coordinates"]),
            PAPER["complex_step_coordinates"],
            _compare_count(_n(e["complex_step_coordinates"]), PAPER["complex_step_coordinates"]),
        ),
        (
            "Table 3 max complex-step error",
            _e(e["max_complex_step_error"]),
            PAPER["max_complex_step_error"],
            _compare_error(e["max_complex_step_error"], 9.99e-16),
        ),
        (
            "Table 3 joint-alias programs",
            _n(j["programs"]),
            PAPER["joint_programs"],
            _compare_count(_n(j["programs"]), PAPER["joint_programs"]),
        ),
        (
            "Table 3 supported joint recoveries",
            _frac(j["recoveries_matched"], j["recoveries"]),
            PAPER["joint_recoveries"],
            _compare_count(_frac(j["recoveries_matched"], j["recoveries"]), PAPER["joint_recoveries"]),
        ),
        (
            "Table 3 max joint gradient error",
            _e(j["max_joint_gradient_error"]),
            PAPER["max_joint_gradient_error"],
            _compare_error(j["max_joint_gradient_error"], 4.44e-16),
        ),
        (
            "Table 3 explicit unsupported outcomes",
            _n(j["unsupported"]),
            PAPER["unsupported"],
            _compare_count(_n(j["unsupported"]), PAPER["unsupported"]),
        ),
        (
            "§7 joint-alias stored operations",
            _n(j["stored_operations"]),
            PAPER["stored_operations"],
            _compare_count(_n(j["stored_operations"]), PAPER["stored_operations"]),
        ),
    ]
    # Only the suites that ran (rows of a suite follow each other: 4, 4, 6, 5); a suite with
    # no programs would read "0 vs 1,200 — differs" beside the paper, so it is named instead.
    ran = [bool(d["programs"]), bool(b["programs"]), bool(e["programs"]), bool(j["programs"])]
    suites = [ran[0]] * 4 + [ran[1]] * 4 + [ran[2]] * 6 + [ran[3]] * 5
    lines = ["| quantity | ours | paper | comparison |", "|---|---|---|---|"]
    lines += [
        f"| {name} | {ours} | {paper} | {cmp} |"
        for (name, ours, paper, cmp), keep in zip(rows, suites, strict=True)
        if keep
    ]
    missing = [name for name, did in zip(_SUITES, ran, strict=True) if not did]
    if missing:
        lines += ["", f"Not run in these results: {', '.join(missing)}."]
    if ran[2]:
        lines += ["", "### Engines by write density (Table 1)", ""]
        lines += _table(*_all(con, "finite_engines_by_method"))
        lines += ["", "### Retained-byte ratios (geometric mean over programs, with min–max)", ""]
        lines += _table(*_all(con, "finite_byte_ratios"))
    notes = _notes(d, b)
    if notes:
        lines += ["", "### Notes from the data", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


#: The four suites, in the order of SQL_FILES, as the report names one that did not run.
_SUITES = (
    "the derivative suite (§6)",
    "the byte suite (§6)",
    "the engine and complex-step suite (§7, Table 3)",
    "the joint-alias suite (Table 3, §7)",
)


def _table(names: list[str], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out


def _notes(d: dict[str, Any], b: dict[str, Any]) -> list[str]:
    notes = []
    missed = (d["control_rows"] or 0) - (d["control_detected"] or 0)
    if missed:
        notes.append(
            f"{missed} final-storage control row(s) were not detected: their control gradient is within "
            f"tolerance of the reference (largest difference {_e(d['control_undetected_max_error'])}), "
            f"i.e. evaluated at the final storage every local derivative the output depends on coincides "
            f"with its historical value; detail.reference_max_abs shows which of these programs have an "
            f"identically zero reference gradient."
        )
    missed = (b["wrong_rng_rows"] or 0) - (b["wrong_rng_detected"] or 0)
    if missed:
        notes.append(
            f"{missed} wrong-RNG replay(s) reproduced both the bytes and the final generator state: "
            f"the shifted stream re-synchronised (NumPy's normal sampler consumes a variable number of "
            f"64-bit outputs) and any differing early draws were overwritten or masked, so eq. 2 holds "
            f"for that replay."
        )
    return notes
